"""The bot branch: a finished run as one commit on a branch of the project's own
repository (same inputs, same commit id), with the title and body of the pull request,
or of the issue when the rebase conflicts.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forkpatch.errors import GitError, UsageError
from forkpatch.fsutil import atomic_write
from forkpatch.git import Git, git_env
from forkpatch.kinds import RunStatus, TrackChangeKind
from forkpatch.project import Project
from forkpatch.series import PATCHES_DIR, SERIES_FILE
from forkpatch.track.stages import (
    BuildDone,
    RebaseConflict,
    RebaseDone,
    RunInfo,
    SmokeRun,
    state_marker,
)
from forkpatch.track.summary import summary_markdown
from forkpatch.track.workdir import SUMMARY_FILE, load_run

CHANGE_BODY_FILE = "change-body.md"
MAX_BODY = 60_000


@dataclass(frozen=True)
class Change:
    """What the pull/merge request (or issue) for a run should be."""

    kind: TrackChangeKind
    tag: str
    status: RunStatus
    title: str
    body_file: Path
    branch: str | None = None
    commit: str | None = None
    base_commit: str | None = None
    updated: bool = False  # the branch ref was created or moved

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "tag": self.tag,
            "status": self.status,
            "title": self.title,
            "body_file": str(self.body_file),
            "branch": self.branch,
            "commit": self.commit,
            "base_commit": self.base_commit,
            "updated": self.updated,
        }


def conflict_title(tag: str, patch: str) -> str:
    return f"forkpatch: patch '{patch}' conflicts with {tag}"


def prepare_change(
    project: Project,
    *,
    out_dir: Path | None = None,
    tag: str | None = None,
    repo: Path | None = None,
) -> Change:
    """Commit the rebased series on the bot branch (idempotent) and name the PR or issue.

    ``repo``: the git repository holding the project (default: the one around
    it). The branch is written with plumbing (a temporary index; the work
    tree, the checked-out branch and the user's index are untouched). The
    commit's parent is the repository's HEAD and its dates are HEAD's, so the
    same inputs give the same commit and a second run moves nothing.
    """
    work, state = load_run(project, out_dir, tag)
    status = state.status
    body = work / CHANGE_BODY_FILE
    text = summary_markdown(state, work)
    if len(text) > MAX_BODY:  # first leave out the full rebase report (range-diffs)
        text = summary_markdown(state, None)
    atomic_write(body, _bounded(text, state_marker(state)).encode())
    tag = state.tag
    rebase = state.stages.rebase
    if isinstance(rebase, RebaseConflict):
        return Change(
            kind="issue",
            tag=tag,
            status=status,
            body_file=body,
            title=conflict_title(tag, rebase.conflict.patch),
        )
    if not isinstance(rebase, RebaseDone):
        return Change(
            kind="none",
            tag=tag,
            status=status,
            body_file=body,
            title=f"forkpatch: rebase onto {tag} did not run",
        )
    title = f"forkpatch: rebase the series onto {tag}"
    if status == "failed":
        title += " (a stage failed: see the summary)"
    elif isinstance(state.stages.build, BuildDone) and (
        state.stages.smoke is None
        or (isinstance(state.stages.smoke, SmokeRun) and state.stages.smoke.status == "not-run")
    ):
        title += " (smoke not run yet)"
    git, prefix = _project_repo(project.root if repo is None else repo, project.root)
    head = git.commit_of("HEAD")
    if head is None:
        raise GitError(
            f"{git.git_dir}: the repository has no commit yet", tip="commit the project first"
        )
    # The message does not depend on how far the stages got: same series, same commit.
    commit = _commit_series(
        git,
        _SeriesCommit(head=head, prefix=prefix, copy_root=work / "project"),
        f"forkpatch: rebase the series onto {tag}\n\n{_commit_body(state.info, rebase)}",
    )
    branch = state.info.branch
    ref = f"refs/heads/{branch}"
    updated = git.commit_of(ref) != commit
    if updated:
        git.update_ref(ref, commit, message=f"forkpatch track: {tag}")
    return Change(
        kind="pull",
        tag=tag,
        status=status,
        title=title,
        body_file=body,
        branch=branch,
        commit=commit,
        base_commit=head,
        updated=updated,
    )


def _bounded(text: str, marker: str = "") -> str:
    """The body within what GitHub (65,536) and GitLab (1,000,000) accept; the state
    marker is kept at the end when the text is cut."""
    if len(text) <= MAX_BODY:
        return text
    note = (
        f"\n\n*(cut at {MAX_BODY} characters: the full summary is {SUMMARY_FILE} in the "
        "pipeline's forkpatch-out artifact)*\n"
    )
    tail = note + (marker + "\n" if marker else "")
    return text[: MAX_BODY - len(tail)].rsplit("\n", 1)[0] + tail


def _commit_body(info: RunInfo, rebase: RebaseDone) -> str:
    counts = ", ".join(f"{n} {s}" for s, n in rebase.summary.items())
    return (
        f"From {info.base_tag} to {info.tag} ({info.key.commit[:12]}): {counts}.\n\n"
        f"Forkpatch-Track: {info.tag} {info.key.commit}\n"
    )


def _project_repo(repo: Path, project_root: Path) -> tuple[Git, str]:
    """The repository's git dir and the project's path inside its work tree."""
    try:
        out = (
            subprocess.run(
                ["git", "-C", str(repo), "rev-parse", "--absolute-git-dir", "--show-toplevel"],
                capture_output=True,
                check=True,
                env=git_env(user_config=True),
            )
            .stdout.decode("utf-8", "surrogateescape")
            .split("\n")
        )
    except (subprocess.CalledProcessError, OSError):
        raise UsageError(
            f"{repo} is not inside a git repository",
            tip="run from a clone of the project's repository, or pass --repo",
        ) from None
    git_dir, top = Path(out[0]), Path(out[1]).resolve()
    try:
        prefix = project_root.resolve().relative_to(top).as_posix()
    except ValueError:
        raise UsageError(
            f"the project {project_root} is not inside the repository {top}",
            tip="pass --repo with the project's repository",
        ) from None
    return Git(git_dir, user_config=True), "" if prefix == "." else prefix


@dataclass(frozen=True)
class _SeriesCommit:
    head: str  # the parent: the repository's HEAD
    prefix: str  # the project's directory in the repository ("" at the top)
    copy_root: Path  # the rebased series.yaml + patches/


def _commit_series(git: Git, where: _SeriesCommit, message: str) -> str:
    """HEAD's tree with series.yaml and patches/ replaced by the run's; one commit on HEAD."""
    from forkpatch.git import commit_date

    pre = f"{where.prefix}/" if where.prefix else ""
    index = git.git_dir / f"forkpatch-track-index-{os.getpid()}"
    env = {"GIT_INDEX_FILE": str(index)}
    try:
        git.run("read-tree", where.head, env=env)
        listed = git.run("ls-files", "-z", "--", f"{pre}{PATCHES_DIR}/", env=env).stdout
        removals = [p for p in listed.decode("utf-8", "surrogateescape").split("\0") if p]
        if removals:
            git.run(
                "update-index",
                "--force-remove",
                "-z",
                "--stdin",
                env=env,
                input=("\0".join(removals) + "\0").encode("utf-8", "surrogateescape"),
            )
        files = [where.copy_root / SERIES_FILE]
        patches = where.copy_root / PATCHES_DIR
        if patches.is_dir():
            files += sorted(p for p in patches.rglob("*") if p.is_file())
        lines = []
        for path in files:
            oid = git.hash_blob(path.read_bytes())
            rel = path.relative_to(where.copy_root).as_posix()
            lines.append(f"100644 {oid}\t{pre}{rel}")
        git.run(
            "update-index",
            "--add",
            "--index-info",
            env=env,
            input=("\n".join(lines) + "\n").encode(),
        )
        tree = git.out("write-tree", env=env)
    finally:
        with contextlib.suppress(FileNotFoundError):
            index.unlink()
    if tree == git.tree_of(where.head):
        return where.head  # the project already holds exactly this series
    return git.commit_tree(tree, [where.head], message, date=commit_date(git, where.head))
