"""The forecast: the series checked in memory against the head of the fork's default
branch (``track.branch`` to pick another), so that the patches that will conflict at
the next release are known before it is tagged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from forkpatch import log
from forkpatch.errors import ForkRepoError
from forkpatch.git import Git
from forkpatch.project import Project
from forkpatch.results import FileConflict

if TYPE_CHECKING:
    from forkpatch.rebase.plan import Outcome


@dataclass(frozen=True)
class ConflictEntry:
    """The patch that conflicts and its conflicting files."""

    patch: str
    files: tuple[str, ...]
    conflicts: tuple[FileConflict, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "patch": self.patch,
            "files": list(self.files),
            "conflicts": [c.to_json() for c in self.conflicts],
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ConflictEntry:
        return cls(
            patch=str(raw["patch"]),
            files=tuple(raw.get("files") or ()),
            conflicts=tuple(FileConflict.from_json(c) for c in raw.get("conflicts") or ()),
        )

    @classmethod
    def from_outcome(cls, outcome: Outcome) -> ConflictEntry:
        """From a rebase outcome: the patch, its files and each file's conflict."""
        return cls(
            patch=outcome.name,
            files=outcome.files,
            conflicts=outcome.conflicts,
        )


@dataclass(frozen=True)
class BranchForecast:
    """How the series fares on the head of the fork's default branch."""

    branch: str
    commit: str
    patches: dict[str, str]
    conflicts: tuple[ConflictEntry, ...]

    @property
    def ok(self) -> bool:
        return not self.conflicts

    def to_json(self) -> dict[str, Any]:
        return {
            "branch": self.branch,
            "commit": self.commit,
            "ok": self.ok,
            "patches": dict(self.patches),
            "conflicts": [c.to_json() for c in self.conflicts],
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> BranchForecast:
        return cls(
            branch=str(raw["branch"]),
            commit=str(raw["commit"]),
            patches=dict(raw.get("patches") or {}),
            conflicts=tuple(ConflictEntry.from_json(c) for c in raw.get("conflicts") or ()),
        )


def fork_branch_head(project: Project) -> tuple[str, str]:
    """(branch, commit) of the fork's default branch (or ``track.branch``), in the store."""
    from forkpatch.forkrepo import local_git_dir

    fork = project.fork()
    wanted = project.series.track.branch
    if fork.local:
        src = Git(local_git_dir(fork.source), user_config=True)
        # The fork's remote may have any name (`upstream`, `1cat`), or there may be
        # none (a bare mirror): origin first, then every other remote, then heads.
        remotes = src.run(
            "for-each-ref", "--format=%(refname)", "refs/remotes", check=False
        ).stdout.decode("utf-8", "replace")
        prefixes = sorted(
            {"/".join(r.split("/")[:3]) for r in remotes.split() if r.count("/") >= 3},
            key=lambda prefix: prefix != "refs/remotes/origin",
        )
        names: list[str] = []
        if wanted:
            names = [*(f"{pre}/{wanted}" for pre in prefixes), f"refs/heads/{wanted}"]
        else:
            for sym in (*(f"{pre}/HEAD" for pre in prefixes), "HEAD"):
                proc = src.run("symbolic-ref", "-q", sym, check=False)
                if proc.returncode == 0:
                    names.append(proc.stdout.decode().strip())
            names += [f"{pre}/{b}" for pre in prefixes for b in ("main", "master")]
            names += ["refs/heads/main", "refs/heads/master"]
        for ref in names:
            commit = src.commit_of(ref)
            if commit is not None:
                return re.sub(r"^refs/(remotes/[^/]+|heads)/", "", ref), commit
        raise ForkRepoError(
            f"cannot find the default branch of the fork at {fork.source}"
            + (f" (track.branch: {wanted})" if wanted else ""),
            tip="set track.branch in series.yaml",
        )
    branch: str | None = wanted
    if not branch:
        proc = fork.store.run(
            "ls-remote", "--symref", fork.source, "HEAD", check=False, timeout=300, user_config=True
        )
        m = re.search(r"^ref: refs/heads/(\S+)\tHEAD$", proc.stdout.decode(), re.MULTILINE)
        branch = m.group(1) if m else "main"
    fork.fetch([f"+refs/heads/{branch}:refs/fork/heads/{branch}"])
    commit = fork.store.commit_of(f"refs/fork/heads/{branch}")
    if commit is None:
        raise ForkRepoError(
            f"the fork at {fork.source} has no branch '{branch}'",
            tip="set track.branch in series.yaml",
        )
    return branch, commit


def _classify_on_branch(project: Project, branch: str, head: str) -> list[Outcome]:
    """The series' outcomes on a branch head, in memory (nothing written): the same
    classification as ``check --onto`` and the rebase."""
    from forkpatch import rebase as rb

    return list(rb.classify(project, rb.Target(branch, head)).outcomes)


def forecast_or_warn(project: Project) -> BranchForecast | None:
    """:func:`forecast`, or None with a warning when the fork's branch cannot be had:
    the forecast is extra; the release answer must come without it."""
    try:
        return forecast(project)
    except ForkRepoError as exc:
        log.warn(f"no forecast: {exc.message}" + (f" ({exc.tip})" if exc.tip else ""))
        return None


def forecast(project: Project) -> BranchForecast:
    """How the series fares on the head of the fork's default branch (changes nothing)."""
    branch, head = fork_branch_head(project)
    project.fork().verify_base(project.series.base.tag, project.series.base.commit)
    outcomes = _classify_on_branch(project, branch, head)
    return BranchForecast(
        branch=branch,
        commit=head,
        patches={o.name: o.status for o in outcomes},
        conflicts=tuple(ConflictEntry.from_outcome(o) for o in outcomes if o.status == "conflict"),
    )
