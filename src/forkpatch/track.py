"""Tracking fork releases: which tags are newer than the base, which to act on, and acting.

Listing (:func:`list_releases`): tags come from the fork (``git ls-remote
--tags`` for a URL, the refs of a local clone), are selected with a pattern
(series.yaml ``track.pattern``, default ``v`` + a PEP 440 version), ordered
with :mod:`packaging` and compared with the base. Pre-releases are skipped
unless ``track.prereleases`` is true; ``track.min-age-days`` holds back a tag
younger than that. Tags that match the pattern but do not parse as versions
are reported, never guessed at.

Forecast (:func:`forecast`): the series checked in memory against the head of
the fork's default branch (``track.branch`` to pick another), so that the
patches that will conflict at the next release are known before it is tagged.

Acting (:func:`run`): for the chosen tag, in a work directory of its own
(``<out>/<tag>/``, never the project itself): check, rebase, build, smoke and
publish, each a *stage* whose typed result (:class:`RebaseDone`,
:class:`BuildDone`, ...) is written to a file of its own,
``<out>/<tag>/stages/<stage>.json``, next to the files that stage made
(``rebase/`` + ``project/``, ``dist/``, ``smoke/``). Each stage writes only its
own files and reads only those of the stages it needs, so a pipeline can run
the stages on different machines and pass the directories along in any order.
``result.json`` and ``summary.md`` (a pull/merge request body) are views of
those files. A stage already done for the same inputs (:class:`RunKey`: the
target tag's commit and the bytes of series.yaml + patches/) is not done
again; the summary carries the key and the outcome in a ``forkpatch-state``
comment, so a later run that is handed the open change's body (``proposed``)
does nothing at all when that change already says everything there is to say.

:func:`prepare_change` turns a finished run into a commit on a bot branch of the
project's own repository (deterministic: same inputs, same commit id), plus
the title and body of the pull request, or of the issue when the rebase
conflicts. Talking to GitHub/GitLab is left to ``ci/forkpatch-ci.sh``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar

from packaging.version import InvalidVersion, Version

from forkpatch import __version__, log
from forkpatch.errors import (
    BuildError,
    ConflictError,
    FetchError,
    ForkpatchError,
    ForkRepoError,
    GitError,
    NewRelease,
    SeriesError,
    SmokeError,
    UsageError,
)
from forkpatch.escape import md_cell, md_code
from forkpatch.fetch import Fetcher
from forkpatch.fsutil import atomic_write, file_sha256, read_regular
from forkpatch.git import Git, git_env
from forkpatch.project import Project
from forkpatch.redact import strip_url_credentials
from forkpatch.series import PATCHES_DIR, SERIES_FILE, PatchEntry

DEFAULT_PATTERN = r"^v(?P<version>.+)$"
DEFAULT_BOT_BRANCH = "forkpatch/rebase-{tag}"
DEFAULT_OUT = "track"  # under the project's .forkpatch/
RESULT_FILE = "result.json"
SUMMARY_FILE = "summary.md"
CHANGE_BODY_FILE = "change-body.md"
MAX_BODY = 60_000
LATEST_FILE = "latest"
RUN_FILE = "run.json"
STAGES_DIR = "stages"
RESULT_VERSION = 2
STEPS = ("rebase", "build", "smoke", "publish")
STATE_MARKER = "forkpatch-state:"

# Exit codes of `forkpatch track` (documented in `forkpatch track --help`).


# =========================================================================== listing


@dataclass
class TagInfo:
    tag: str
    version: str
    commit: str
    date: float | None = None
    prerelease: bool = False
    held_back: str | None = None  # why it is not acted on (too young, pre-release)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tag": self.tag, "version": self.version, "commit": self.commit}
        if self.date is not None:
            out["date"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.date))
        if self.prerelease:
            out["prerelease"] = True
        if self.held_back:
            out["held_back"] = self.held_back
        return out


@dataclass
class TrackReport:
    """Where the series stands against the fork's releases."""

    base: str
    base_version: str | None
    newer: list[TagInfo] = field(default_factory=list)
    target: TagInfo | None = None
    unparsable: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    # Tags that name no commit (a tree, a blob): never a release -> what they name.
    not_commits: dict[str, str] = field(default_factory=dict)
    forecast: Forecast | None = None
    bot_branch: str | None = None  # the bot branch for the target

    @property
    def exit_code(self) -> int:
        return NewRelease.exit_code if self.target is not None else 0

    @property
    def status(self) -> str:
        return "new-release" if self.target else "up-to-date"

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "base": self.base,
            "base_version": self.base_version,
            "newer": [t.to_json() for t in self.newer],
            "target": self.target.to_json() if self.target else None,
            "unparsable": self.unparsable,
            "ignored": self.ignored,
            "not_commits": self.not_commits,
            "forecast": self.forecast.to_json() if self.forecast else None,
            "bot_branch": self.bot_branch,
        }


def _pattern(project: Project) -> re.Pattern[str]:
    raw = project.series.section("track").get("pattern", DEFAULT_PATTERN)
    try:
        pat = re.compile(raw)
    except re.error as exc:
        raise SeriesError(
            f"series.yaml: track.pattern '{raw}' is not a valid regular expression: {exc}",
            tip="fix track.pattern",
        ) from None
    return pat


def parse_tag(tag: str, pattern: re.Pattern[str]) -> Version | str | None:
    """The version a tag names; ``None`` when it does not match the pattern; the text
    that should have been a version (a ``str``) when it matches but does not parse."""
    m = pattern.match(tag)
    if not m:
        return None
    text = m.group("version") if "version" in pattern.groupindex else m.group(0)
    try:
        return Version(text)
    except InvalidVersion:
        return text


def list_releases(project: Project, *, now: float | None = None) -> TrackReport:
    """The fork's release tags newer than the base, and the one to act on."""
    series = project.series
    cfg = series.section("track")
    pattern = _pattern(project)
    allow_pre = bool(cfg.get("prereleases", False))
    min_age = float(cfg.get("min-age-days", 0)) * 86400
    now = time.time() if now is None else now
    base_v = parse_tag(series.base.tag, pattern)
    if not isinstance(base_v, Version):
        raise SeriesError(
            f"series.yaml: the base tag '{series.base.tag}' does not match "
            f"track.pattern or is not a PEP 440 version",
            tip="set track.pattern so that its 'version' group captures it",
        )
    fork = project.fork()
    tags, not_commits = fork.source_refs()
    report = TrackReport(base=series.base.tag, base_version=str(base_v))
    dates = _tag_dates(project) if min_age else {}
    candidates: list[tuple[Version, TagInfo]] = []
    for tag, commit in sorted({**tags, **not_commits}.items()):
        v = parse_tag(tag, pattern)
        if v is None:
            report.ignored.append(tag)
            continue
        if isinstance(v, str):
            report.unparsable.append(tag)
            continue
        if v <= base_v:
            continue
        if tag in not_commits:
            _not_a_release(report, tag, not_commits[tag])
            continue
        info = TagInfo(
            tag=tag,
            version=str(v),
            commit=commit,
            date=dates.get(tag),
            prerelease=v.is_prerelease or v.is_devrelease,
        )
        if info.prerelease and not allow_pre:
            info.held_back = "pre-release (set track.prereleases: true to act on it)"
        elif min_age and info.date is not None and now - info.date < min_age:
            days = (now - info.date) / 86400
            info.held_back = (
                f"only {days:.1f} day(s) old; track.min-age-days is {min_age / 86400:g}"
            )
        candidates.append((v, info))
    candidates.sort(key=lambda x: x[0])
    actionable = [info for _, info in candidates if info.held_back is None]
    # The release to act on must name a commit (a remote fork's new tag is only known
    # once fetched): a tag of a tree or a blob is passed over, and said so.
    while actionable:
        kind = fork.tag_kind(actionable[-1].tag, actionable[-1].commit)
        if kind == "commit":
            break
        gone = actionable.pop()
        _not_a_release(report, gone.tag, kind)
        candidates = [c for c in candidates if c[1] is not gone]
    report.newer = [info for _, info in candidates]
    report.target = actionable[-1] if actionable else None
    if report.target is not None:
        report.bot_branch = bot_branch(project, report.target.tag)
    report.unparsable.sort()
    report.ignored.sort()
    return report


def _not_a_release(report: TrackReport, tag: str, kind: str) -> None:
    report.not_commits[tag] = kind
    log.warn(f"tag '{tag}' names a {kind}, not a commit: it is not a release")


def _tag_dates(project: Project) -> dict[str, float]:
    """Creation date of each tag (tagger date, or the commit date for light tags)."""
    fork = project.fork()
    fork.fetch(["+refs/tags/*:refs/tags/*"])
    out = fork.store.out(
        "for-each-ref", "--format=%(refname:strip=2) %(creatordate:unix)", "refs/tags"
    )
    dates = {}
    for line in out.splitlines():
        name, _, stamp = line.partition(" ")
        if stamp.strip().isdigit():
            dates[name] = float(stamp)
    return dates


# =========================================================================== forecast


@dataclass(frozen=True)
class ConflictSpot:
    """One conflicting file of a patch: where, which hunks, why."""

    path: str
    hunks: tuple[int, ...]
    line: int | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "hunks": list(self.hunks),
            "line": self.line,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ConflictSpot:
        return cls(
            path=str(raw["path"]),
            hunks=tuple(int(h) for h in raw.get("hunks") or ()),
            line=raw.get("line"),
            reason=str(raw["reason"]),
        )


@dataclass(frozen=True)
class ConflictEntry:
    """The patch that conflicts and its conflicting files."""

    patch: str
    files: tuple[str, ...]
    conflicts: tuple[ConflictSpot, ...]

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
            conflicts=tuple(ConflictSpot.from_json(c) for c in raw.get("conflicts") or ()),
        )

    @classmethod
    def from_outcome(cls, outcome: Mapping[str, Any]) -> ConflictEntry:
        """From a rebase outcome's JSON (``name``, ``files``, ``conflicts``)."""
        return cls.from_json({**outcome, "patch": outcome["name"]})


@dataclass(frozen=True)
class Forecast:
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
    def from_json(cls, raw: Mapping[str, Any]) -> Forecast:
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
    wanted = project.series.section("track").get("branch")
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


def _classify_on_branch(project: Project, branch: str, head: str) -> list[Any]:
    """The series' outcomes on a branch head, in memory (nothing written): the same
    classification as ``check --onto`` and the rebase."""
    from forkpatch import rebase as rb

    return list(rb.classify(project, rb.Target(branch, head)).outcomes)


def forecast_or_warn(project: Project) -> Forecast | None:
    """:func:`forecast`, or None with a warning when the fork's branch cannot be had:
    the forecast is extra; the release answer must come without it."""
    try:
        return forecast(project)
    except ForkRepoError as exc:
        log.warn(f"no forecast: {exc.message}" + (f" ({exc.tip})" if exc.tip else ""))
        return None


def forecast(project: Project) -> Forecast:
    """How the series fares on the head of the fork's default branch (changes nothing)."""
    branch, head = fork_branch_head(project)
    project.fork().verify_base(project.series.base.tag, project.series.base.commit)
    outcomes = _classify_on_branch(project, branch, head)
    return Forecast(
        branch=branch,
        commit=head,
        patches={o.name: o.status for o in outcomes},
        conflicts=tuple(
            ConflictEntry.from_outcome(o.to_json()) for o in outcomes if o.status == "conflict"
        ),
    )


# =========================================================================== run state


@dataclass(frozen=True)
class RunOptions:
    """What `forkpatch track --run` was asked to do; built once by the CLI."""

    out_dir: Path | None = None
    tag: str | None = None  # act on this tag instead of the newest release
    steps: tuple[str, ...] = STEPS
    publish: bool = True
    publish_to: str | None = None
    allow_missing_tiers: tuple[str, ...] = ()
    base_wheel: str | None = None  # path, URL or template with {tag} / {version}
    build_mode: str | None = None
    smoke_tier: str = "sm70"
    smoke_deps: str | None = None
    smoke_python: str | None = None
    smoke_with: tuple[Path, ...] = ()  # extra wheels for the smoke environment
    forecast: bool = True
    proposed: str | None = None  # body of the open change for this release, if any


@dataclass(frozen=True)
class RunKey:
    """The inputs of a run: a stage done for the same key is not done again."""

    tag: str
    commit: str
    series_sha256: str

    def to_json(self) -> dict[str, str]:
        return {"tag": self.tag, "commit": self.commit, "series_sha256": self.series_sha256}

    @classmethod
    def from_json(cls, raw: Any) -> RunKey | None:
        if not isinstance(raw, Mapping):
            return None
        try:
            return cls(str(raw["tag"]), str(raw["commit"]), str(raw["series_sha256"]))
        except KeyError:
            return None

    def text(self) -> str:
        return f"{self.tag} at {self.commit[:12]}, series {self.series_sha256[:12]}"


@dataclass(frozen=True)
class RunInfo:
    """What a run is about; written once (``run.json``) by the job that starts it."""

    key: RunKey
    tag_version: str
    base_tag: str
    base_commit: str
    fork_name: str
    fork_url: str
    project: str
    branch: str
    newer: tuple[dict[str, Any], ...]
    forkpatch_version: str

    @property
    def tag(self) -> str:
        return self.key.tag

    def to_json(self) -> dict[str, Any]:
        return {
            "version": RESULT_VERSION,
            "key": self.key.to_json(),
            "tag": self.key.tag,
            "tag_version": self.tag_version,
            "tag_commit": self.key.commit,
            "base": {"tag": self.base_tag, "commit": self.base_commit},
            "fork": {"name": self.fork_name, "url": self.fork_url},
            "project": self.project,
            "branch": self.branch,
            "newer": list(self.newer),
            "forkpatch_version": self.forkpatch_version,
        }

    @classmethod
    def from_json(cls, raw: Any) -> RunInfo | None:
        if not isinstance(raw, Mapping) or raw.get("version") != RESULT_VERSION:
            return None
        key = RunKey.from_json(raw.get("key"))
        if key is None:
            return None
        try:
            return cls(
                key=key,
                tag_version=str(raw["tag_version"]),
                base_tag=str(raw["base"]["tag"]),
                base_commit=str(raw["base"]["commit"]),
                fork_name=str(raw["fork"]["name"]),
                fork_url=str(raw["fork"]["url"]),
                project=str(raw["project"]),
                branch=str(raw["branch"]),
                newer=tuple(raw.get("newer") or ()),
                forkpatch_version=str(raw.get("forkpatch_version", "?")),
            )
        except (KeyError, TypeError):
            return None


# ---------------------------------------------------------------- stage results


@dataclass(frozen=True)
class Skipped:
    reason: str
    status: ClassVar[str] = "skipped"


@dataclass(frozen=True)
class Failed:
    error: str
    tip: str | None = None
    target: str | None = None  # publish: where it was going (no credentials)
    status: ClassVar[str] = "failed"


@dataclass(frozen=True)
class RebaseDone:
    relation: str | None
    note: str | None
    summary: dict[str, int]
    patches: dict[str, str]
    changed_files: tuple[str, ...]
    report_json: str
    report_markdown: str
    series_sha256: str  # of the rebased series in project/
    forecast: Forecast | None = None
    #: each patch's upstream request, as ``status --upstream`` sees it: {"state", ...}
    upstream: dict[str, dict[str, str]] | None = None
    status: ClassVar[str] = "done"


@dataclass(frozen=True)
class RebaseConflict:
    relation: str | None
    conflict: ConflictEntry
    blocked: tuple[str, ...]
    patches: dict[str, str]
    forecast: Forecast | None = None
    status: ClassVar[str] = "conflict"


@dataclass(frozen=True)
class BuildDone:
    mode: str
    reason: str
    version: str
    wheels: dict[str, str]  # file name -> sha256
    base_wheel: str | None
    provenance: dict[str, Any]  # the wheel's forkpatch-provenance.json
    status: ClassVar[str] = "done"


@dataclass(frozen=True)
class SmokeRun:
    passed: bool
    tier: str
    runner: str
    wheels: dict[str, str]
    report: str
    tiers: dict[str, str]
    not_run: dict[str, str]
    checks: dict[str, str]
    failed: tuple[str, ...]
    #: tier -> why, for the tiers asked for that did not run or ran incomplete (and
    #: were not accepted by --allow-missing-tier): the smoke is not done yet.
    missing: dict[str, str] = field(default_factory=dict)
    #: ``forkpatch droppable`` on the rebased series: patch -> {"verdict", "evidence"}
    droppable: dict[str, dict[str, str]] | None = None

    @property
    def status(self) -> str:
        if not self.passed:
            return "failed"
        return "not-run" if self.missing else "done"


@dataclass(frozen=True)
class PublishDone:
    target: str
    wheels: dict[str, str]
    actions: dict[str, str]
    allowed_missing_tiers: tuple[str, ...]
    status: ClassVar[str] = "done"


RebaseResult = RebaseDone | RebaseConflict | Failed | Skipped
BuildResult = BuildDone | Failed | Skipped
SmokeResult = SmokeRun | Failed | Skipped
PublishResult = PublishDone | Failed | Skipped
StageResult = RebaseResult | BuildResult | SmokeResult | PublishResult

_NESTED: dict[str, Callable[[Any], Any]] = {
    "forecast": lambda v: None if v is None else Forecast.from_json(v),
    "conflict": ConflictEntry.from_json,
}
_BY_STATUS: dict[str, dict[str, type]] = {
    "rebase": {"done": RebaseDone, "conflict": RebaseConflict},
    "build": {"done": BuildDone},
    "smoke": {"done": SmokeRun, "failed": SmokeRun, "not-run": SmokeRun},
    "publish": {"done": PublishDone},
}


def stage_to_json(result: StageResult) -> dict[str, Any]:
    out: dict[str, Any] = {"status": result.status}
    for f in fields(result):
        value = getattr(result, f.name)
        if hasattr(value, "to_json"):
            value = value.to_json()
        elif isinstance(value, tuple):
            value = list(value)
        if value is not None or f.name not in ("tip", "target", "forecast"):
            out[f.name] = value
    return out


def stage_from_json(stage: str, raw: Any) -> StageResult | None:
    """A stage result read back; ``None`` when the file is not one (never trusted blindly)."""
    if not isinstance(raw, Mapping):
        return None
    status = raw.get("status")
    cls: type | None = {"skipped": Skipped}.get(str(status))
    if cls is None:
        cls = _BY_STATUS.get(stage, {}).get(str(status))
        if cls is None and status == "failed" and "error" in raw:
            cls = Failed
    if cls is None:
        return None
    kwargs: dict[str, Any] = {}
    try:
        for f in fields(cls):
            if f.name not in raw:
                continue
            value = raw[f.name]
            if f.name in _NESTED:
                value = _NESTED[f.name](value)
            elif isinstance(value, list):
                value = tuple(value)
            kwargs[f.name] = value
        return cls(**kwargs)  # type: ignore[no-any-return]
    except (KeyError, TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Stages:
    """The results so far; ``None`` for a stage that has not run here."""

    rebase: RebaseResult | None = None
    build: BuildResult | None = None
    smoke: SmokeResult | None = None
    publish: PublishResult | None = None

    def get(self, stage: str) -> StageResult | None:
        return getattr(self, stage)  # type: ignore[no-any-return]

    def with_result(self, stage: str, result: StageResult) -> Stages:
        return replace(self, **{stage: result})  # type: ignore[arg-type]

    def to_json(self) -> dict[str, Any]:
        return {s: stage_to_json(r) for s in STEPS if (r := self.get(s)) is not None}


def overall_status(stages: Stages) -> str:
    """conflict | failed | published | smoked | built | rebased | pending."""
    if isinstance(stages.rebase, RebaseConflict):
        return "conflict"
    present = [r for s in STEPS if (r := stages.get(s)) is not None]
    if any(r.status == "failed" for r in present):
        return "failed"
    for result, name in (
        (stages.publish, "published"),
        (stages.smoke, "smoked"),
        (stages.build, "built"),
        (stages.rebase, "rebased"),
    ):
        if result is not None and result.status == "done":
            return name
    return "pending"


def is_final(stages: Stages) -> bool:
    """Nothing more will come of running these inputs again (no runner needs to work)."""
    status = overall_status(stages)
    if status in ("conflict", "failed", "published"):
        return True
    return status == "smoked" and isinstance(stages.publish, Skipped)


@dataclass(frozen=True)
class RunState:
    info: RunInfo
    stages: Stages

    @property
    def tag(self) -> str:
        return self.info.tag

    @property
    def status(self) -> str:
        return overall_status(self.stages)

    def to_json(self) -> dict[str, Any]:
        return {**self.info.to_json(), "stages": self.stages.to_json(), "status": self.status}


@dataclass(frozen=True)
class PriorState:
    """What an open change's body says about the run that wrote it."""

    key: RunKey
    status: str
    final: bool


def state_marker(state: RunState) -> str:
    data = {
        "key": state.info.key.to_json(),
        "status": state.status,
        "final": is_final(state.stages),
    }
    return f"<!-- {STATE_MARKER} {json.dumps(data, sort_keys=True)} -->"


def parse_state_marker(text: str) -> PriorState | None:
    """The ``forkpatch-state`` comment of a change body (the last one), if any."""
    found = re.findall(rf"<!-- {re.escape(STATE_MARKER)} (\{{.*?\}}) -->", text)
    if not found:
        return None
    try:
        raw = json.loads(found[-1])
    except ValueError:
        return None
    key = RunKey.from_json(raw.get("key")) if isinstance(raw, dict) else None
    if key is None:
        return None
    return PriorState(key=key, status=str(raw.get("status")), final=raw.get("final") is True)


# ---------------------------------------------------------------- the work directory


class WorkDir:
    """``<out>/<tag>/``: one file per stage, plus the derived result.json / summary.md."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def stage_file(self, stage: str) -> Path:
        return self.path / STAGES_DIR / f"{stage}.json"

    def load_info(self) -> RunInfo | None:
        return RunInfo.from_json(_load_json(self.path / RUN_FILE))

    def load_stages(self) -> Stages:
        stages = Stages()
        for stage in STEPS:
            raw = _load_json(self.stage_file(stage))
            if raw is None:
                continue
            result = stage_from_json(stage, raw)
            if result is None:
                log.warn(f"{self.stage_file(stage)} is not a {stage} result; ignored")
                continue
            stages = stages.with_result(stage, result)
        return stages

    def save_info(self, info: RunInfo) -> None:
        atomic_write(self.path / RUN_FILE, _dump(info.to_json()))

    def save_stage(self, stage: str, result: StageResult) -> None:
        atomic_write(self.stage_file(stage), _dump(stage_to_json(result)))

    def save_views(self, state: RunState) -> None:
        atomic_write(self.path / RESULT_FILE, _dump(state.to_json()))
        atomic_write(self.path / SUMMARY_FILE, summary_markdown(state, self.path).encode())


@dataclass(frozen=True)
class RunResult:
    status: str
    report: TrackReport
    state: RunState | None = None
    work_dir: Path | None = None
    error: ForkpatchError | None = None
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        if self.state is None:
            return {
                "version": RESULT_VERSION,
                "status": self.status,
                "base": self.report.base,
                "track": self.report.to_json(),
                **({"note": self.note} if self.note else {}),
            }
        out = self.state.to_json()
        out["status"] = self.status
        if self.note:
            out["note"] = self.note
        return out


def series_digest(project: Project) -> str:
    """sha256 over series.yaml and every file in patches/: the run's input identity."""
    h = hashlib.sha256()
    files = [project.series_path]
    if project.patches_dir.is_dir():
        files += sorted(p for p in project.patches_dir.rglob("*") if p.is_file())
    for path in files:
        rel = path.relative_to(project.root).as_posix()
        data = read_regular(path)
        h.update(f"{rel}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def safe_name(tag: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", tag)


def bot_branch(project: Project, tag: str) -> str:
    template = project.series.section("track").get("bot-branch", DEFAULT_BOT_BRANCH)
    return str(template).format(tag=tag, version=_version_of(tag))


def _version_of(tag: str) -> str:
    text = tag[1:] if tag[:1] in ("v", "V") else tag
    try:
        return str(Version(text))
    except InvalidVersion:
        return text


def out_root(project: Project, out_dir: Path | None) -> Path:
    return (out_dir or project.state_dir / DEFAULT_OUT).resolve()


def pick_tag(project: Project, report: TrackReport, tag: str) -> TagInfo:
    """``--tag``: the named tag, with a warning when it is not a release to act on."""
    for info in report.newer:
        if info.tag == tag:
            if info.held_back:
                log.warn(
                    f"{tag} is held back ({info.held_back}); acting on it because --tag names it"
                )
            return info
    tags, not_commits = project.fork().source_refs()
    if tag in not_commits:
        raise UsageError(
            f"tag '{tag}' names a {not_commits[tag]}, not a commit: it is not a release",
            tip="name a tag of a commit with --tag",
        )
    if tag not in tags:
        from forkpatch.forkrepo import nearest_tags

        raise UsageError(
            f"tag '{tag}' is not in the fork; nearest: "
            f"{', '.join(nearest_tags(tag, tags)) or 'none'}"
        )
    parsed = parse_tag(tag, _pattern(project))
    if not isinstance(parsed, Version):
        log.warn(
            f"{tag} is not a release tag (it does not match track.pattern "
            f"'{project.series.section('track').get('pattern', DEFAULT_PATTERN)}' as a PEP 440 "
            "version); acting on it because --tag names it, as for a pre-release"
        )
    elif report.base_version is not None and parsed <= Version(report.base_version):
        log.warn(
            f"{tag} is not newer than the base {report.base}; acting on it because --tag names it"
        )
    return TagInfo(tag=tag, version=_version_of(tag), commit=tags[tag])


def _start(project: Project, report: TrackReport, target: TagInfo, work: WorkDir) -> RunState:
    """The state of the run for these inputs: resumed from ``work`` or new (``work`` cleared)."""
    key = RunKey(target.tag, target.commit, series_digest(project))
    prev = work.load_info()
    if prev is not None and prev.key != key:
        log.info(f"{work.path} holds a run for other inputs ({prev.key.text()}); starting over")
        prev = None
    if prev is None:
        if work.path.exists():
            shutil.rmtree(work.path)
        work.path.mkdir(parents=True)
        series = project.series
        prev = RunInfo(
            key=key,
            tag_version=target.version,
            base_tag=series.base.tag,
            base_commit=series.base.commit,
            fork_name=series.fork.name,
            fork_url=series.fork.url,
            project=str(project.root),
            branch=bot_branch(project, target.tag),
            newer=tuple(t.to_json() for t in report.newer),
            forkpatch_version=__version__,
        )
        work.save_info(prev)
    return RunState(info=prev, stages=work.load_stages())


def _warn_pending_edits(project: Project) -> None:
    """A run works on a copy of series.yaml and patches/ and never touches the editing
    work tree; what is edited there and not refreshed is not in what it rebases."""
    from forkpatch.stack import Stack, describe_changes

    stack = Stack(project)
    pending = stack.pending_edits()
    if pending:
        log.warn(
            f"the work tree {stack.worktree_path()} has uncommitted changes that are in no "
            f"patch: {describe_changes(pending)}; this run takes series.yaml and patches/ as "
            "they are, without them (the work tree is left as it is; `forkpatch refresh` "
            "writes them into the top patch)"
        )


def run(project: Project, opts: RunOptions) -> RunResult:
    """Act on the newest release (or ``opts.tag``): see the module docstring.

    Never raises for a stage that fails: the failure is recorded, the summary
    written, and the error returned in :attr:`RunResult.error` for the CLI.
    """
    for s in opts.steps:
        if s not in STEPS:
            raise UsageError(f"unknown step '{s}'", tip=f"steps: {', '.join(STEPS)}")
    _warn_pending_edits(project)
    report = list_releases(project)
    target = pick_tag(project, report, opts.tag) if opts.tag else report.target
    if target is None:
        log.info(f"up to date: no release newer than {report.base} to act on")
        return RunResult(status="up-to-date", report=report)
    root = out_root(project, opts.out_dir)
    prior = parse_state_marker(opts.proposed or "")
    key = RunKey(target.tag, target.commit, series_digest(project))
    if prior is not None and prior.key == key and prior.final:
        note = (
            f"the open change for {target.tag} already reports these inputs ({key.text()}): "
            f"{prior.status}; nothing to do"
        )
        log.info(note)
        return RunResult(status="unchanged", report=report, note=note)
    work = WorkDir(root / safe_name(target.tag))
    state = _start(project, report, target, work)
    atomic_write(root / LATEST_FILE, (work.path.name + "\n").encode())
    ctx = _RunCtx(project=project, opts=opts, work=work, info=state.info)
    stages = state.stages
    error: ForkpatchError | None = None
    stopped: str | None = None
    try:
        for step in STEPS:
            if step not in opts.steps:
                continue
            if stopped is not None:
                # Results of an earlier run for these stages no longer hold.
                stages = stages.with_result(step, Skipped(_stop_reason(stopped, stages)))
                work.save_stage(step, stages.get(step))  # type: ignore[arg-type]
                continue
            outcome = ctx.run_stage(step, stages)
            if outcome.result is not None:
                stages = stages.with_result(step, outcome.result)
                work.save_stage(step, outcome.result)
            if outcome.error is not None:
                error = error or outcome.error
            if outcome.stop:
                stopped = step
    finally:
        state = RunState(info=state.info, stages=stages)
        work.save_views(state)
    return RunResult(
        status=state.status, report=report, state=state, work_dir=work.path, error=error
    )


def _stop_reason(stage: str, stages: Stages) -> str:
    result = stages.get(stage)
    if isinstance(result, RebaseConflict):
        return "the rebase conflicts"
    if isinstance(result, Skipped):
        return f"{stage} was skipped ({result.reason})"
    return f"the {stage} stage did not succeed"


def _load_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(read_regular(path, follow=False).decode("utf-8"))
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _dump(data: Any) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


def runner_class() -> str:
    """What GPU this machine has, for smoke results: 'cpu' or 'cuda:<cap>,...'."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return "cpu"
    try:
        out = subprocess.run(
            [exe, "--query-gpu=compute_cap", "--format=csv,noheader"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            encoding="utf-8",
            errors="replace",
            timeout=30,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "cpu"
    caps = sorted({c.strip() for c in out.splitlines() if c.strip()})
    return "cuda:" + ",".join(caps) if caps else "cpu"


# =========================================================================== stages


@dataclass(frozen=True)
class StageOutcome:
    """What one stage did: its result to record (None: nothing to record), whether the
    stages after it must not run, and the error for the CLI's exit code."""

    result: StageResult | None
    stop: bool = False
    error: ForkpatchError | None = None


def _failed(stage: str, exc: ForkpatchError, target: str | None = None) -> StageOutcome:
    log.error(f"{stage}: {exc.message}")
    return StageOutcome(Failed(exc.message, exc.tip, target), stop=True, error=exc)


def _out_of_order(exc: UsageError) -> StageOutcome:
    """Asked for a stage whose input is not here: say so, record nothing."""
    return StageOutcome(None, stop=True, error=exc)


class _RunCtx:
    """The project, the options and the work directory of one run; runs one stage at a
    time on the typed results so far and returns the new result (it keeps no state)."""

    def __init__(self, project: Project, opts: RunOptions, work: WorkDir, info: RunInfo) -> None:
        self.project = project
        self.opts = opts
        self.work = work
        self.info = info
        self._copy: Project | None = None

    @property
    def tag(self) -> str:
        return self.info.tag

    @property
    def dir(self) -> Path:
        return self.work.path

    def run_stage(self, stage: str, stages: Stages) -> StageOutcome:
        runner: Callable[[Stages], StageOutcome] = getattr(self, f"stage_{stage}")
        return runner(stages)

    def copy(self) -> Project:
        """The project as this run sees it: ``<work>/project`` (series.yaml + patches/).

        Its private store borrows the objects of the project's own store, so no
        second fetch of the fork happens and the copy works on any machine where
        the project can reach the fork.
        """
        if self._copy is None:
            dest = self.dir / "project"
            if not (dest / SERIES_FILE).is_file():
                if dest.exists():
                    shutil.rmtree(dest)
                (dest / PATCHES_DIR).mkdir(parents=True)
                shutil.copy2(self.project.series_path, dest / SERIES_FILE)
                if self.project.patches_dir.is_dir():
                    shutil.copytree(
                        self.project.patches_dir, dest / PATCHES_DIR, dirs_exist_ok=True
                    )
            self._copy = Project(root=dest, fork_override=str(self.project.fork().store.git_dir))
        return self._copy

    def prepare_store(self) -> None:
        """Make sure the project's store holds the base and the tag the copy will ask for."""
        fork = self.project.fork()
        series = self.project.series
        fork.verify_base(series.base.tag, series.base.commit)
        fork.resolve_tag(self.tag)

    # ---------------------------------------------------------------- rebase

    def stage_rebase(self, stages: Stages) -> StageOutcome:
        done = stages.rebase
        if (
            isinstance(done, (RebaseDone, RebaseConflict))
            and (self.dir / "project" / SERIES_FILE).is_file()
        ):
            log.info(f"rebase onto {self.tag}: already {done.status} (in {self.dir})")
            return StageOutcome(done, stop=isinstance(done, RebaseConflict))
        from forkpatch import rebase as rb

        fc = None
        if self.opts.forecast:
            with contextlib.suppress(ForkpatchError):
                fc = forecast(self.project)
        try:
            self.prepare_store()
            copy = self.copy()
            with log.step(f"forkpatch check --onto {self.tag}"):
                plan = rb.check(copy, rb.RebaseOptions(onto=self.tag))
            if not plan.ok:
                conflict = _conflict_stage(plan.to_json(), fc)
                return StageOutcome(
                    conflict,
                    stop=True,
                    error=ConflictError(
                        f"the series does not rebase cleanly onto {self.tag}: patch "
                        f"'{conflict.conflict.patch}' conflicts",
                        tip=f"the summary in {self.dir / SUMMARY_FILE} says what to run locally",
                    ),
                )
            with log.step(f"forkpatch rebase --onto {self.tag}"), copy.locked("rebase"):
                result = rb.rebase(
                    copy, rb.RebaseOptions(onto=self.tag, report_dir=self.dir / "rebase")
                )
        except ConflictError as exc:  # check said clean but the rebase stopped: undo it
            with contextlib.suppress(ForkpatchError):
                rb.abort(self.copy())
            return _failed("rebase", exc)
        except ForkpatchError as exc:
            return _failed("rebase", exc)
        from forkpatch.rebase import report as report_mod

        stem = report_mod.file_stem(result.report)
        return StageOutcome(
            RebaseDone(
                relation=result.plan.relation,
                note=result.plan.note,
                summary=dict(result.report["summary"]),
                patches={o.name: o.status for o in result.plan.outcomes},
                changed_files=tuple(result.written),
                report_json=f"rebase/{stem}.json",
                report_markdown=f"rebase/{stem}.md",
                series_sha256=series_digest(copy),
                forecast=fc,
                upstream=_upstream(copy, self.project.series.patches),
            )
        )

    def _rebased(self, stage: str, stages: Stages) -> Project | StageOutcome:
        """The rebased copy, or the outcome to record when the rebase has not succeeded."""
        rebase = stages.rebase
        if rebase is None:
            return _out_of_order(
                UsageError(
                    f"cannot {stage}: no rebase onto {self.tag} in {self.dir}",
                    tip="run the rebase step first (`forkpatch track --run --steps rebase`) "
                    "and pass its output directory along (--out)",
                )
            )
        if not isinstance(rebase, RebaseDone):
            why = (
                "the rebase conflicts"
                if isinstance(rebase, RebaseConflict)
                else "the rebase failed"
            )
            return StageOutcome(Skipped(why), stop=True)
        copy = self.copy()
        if series_digest(copy) != rebase.series_sha256:
            exc = UsageError(
                f"{copy.root} was changed after the rebase", tip=f"remove {self.dir} and run again"
            )
            return StageOutcome(Failed(exc.message, exc.tip), stop=True, error=exc)
        return copy

    # ---------------------------------------------------------------- build

    def stage_build(self, stages: Stages) -> StageOutcome:
        copy = self._rebased("build", stages)
        if isinstance(copy, StageOutcome):
            return copy
        dist = self.dir / "dist"
        done = stages.build
        if isinstance(done, BuildDone) and _files_match(dist, done.wheels):
            log.info(f"build for {self.tag}: already done ({', '.join(done.wheels)})")
            return StageOutcome(done)
        from forkpatch.wheels.buildwheel import build_wheel
        from forkpatch.wheels.options import BuildOptions

        try:
            base_wheel = self.base_wheel(copy)
            self.prepare_store()
            if dist.exists():
                shutil.rmtree(dist)
            with copy.locked("build-wheel"):
                result = build_wheel(
                    copy,
                    BuildOptions(
                        mode=self.opts.build_mode or "auto", base_wheel=base_wheel, out_dir=dist
                    ),
                )
        except ForkpatchError as exc:
            return _failed("build", exc)
        return StageOutcome(
            BuildDone(
                mode=result.mode,
                reason=result.reason,
                version=result.version,
                wheels={w.name: result.sha256[w.name] for w in result.wheels},
                base_wheel=base_wheel.name if base_wheel else None,
                provenance=result.provenance.to_dict(),
            )
        )

    def base_wheel(self, copy: Project) -> Path | None:
        """``--base-wheel`` or build.base-wheel, with {tag}/{version} filled in; URLs fetched."""
        raw = self.opts.base_wheel or copy.series.section("build").get("base-wheel")
        if not raw:
            return None
        text = raw.replace("{tag}", self.tag).replace("{version}", _version_of(self.tag))
        if re.match(r"^https?://", text):
            return _download(text, self.dir / "base-wheel")
        if text.startswith("file://"):
            text = urllib.parse.unquote(urllib.parse.urlsplit(text).path)
        path = Path(text).expanduser()
        if not path.is_absolute():
            path = self.project.root / path
        if not path.is_file():
            raise BuildError(
                f"the base wheel for {self.tag} is not there: {path} (from '{raw}')",
                tip="download the fork's released wheel for the tag there, or "
                "pass --base-wheel PATH|URL (may contain {tag} / {version})",
            )
        return path

    # ---------------------------------------------------------------- smoke

    def stage_smoke(self, stages: Stages) -> StageOutcome:
        build = stages.build
        if build is None:
            return _out_of_order(
                UsageError(
                    f"cannot smoke: no build for {self.tag} in {self.dir}",
                    tip="run the build step first and pass its output directory along (--out)",
                )
            )
        if not isinstance(build, BuildDone):
            return StageOutcome(Skipped("nothing was built"), stop=True)
        copy = self.copy()
        dist = self.dir / "dist"
        if not _files_match(dist, build.wheels):
            return _failed(
                "smoke",
                SmokeError(
                    f"the wheels in {dist} are not the ones the build made",
                    tip=f"remove {self.dir} and run again",
                ),
            )
        runner = runner_class()
        done = stages.smoke
        if (
            isinstance(done, SmokeRun)
            and done.status == "done"
            and done.wheels == build.wheels
            and done.tier == self.opts.smoke_tier
            and done.runner == runner
        ):
            log.info(f"smoke for {self.tag}: already done on this kind of runner ({runner})")
            return StageOutcome(done)
        return self._smoke(copy, build, runner)

    def _smoke(self, copy: Project, build: BuildDone, runner: str) -> StageOutcome:
        from forkpatch.smoke import SmokeOptions, run_smoke

        section = copy.series.section("smoke")
        smoke_dir = self.dir / "smoke"
        smoke_dir.mkdir(exist_ok=True)
        report_path = smoke_dir / "report.json"
        wheels = tuple(self.dir / "dist" / name for name in build.wheels)
        try:
            outcome = run_smoke(
                SmokeOptions(
                    wheels=wheels + tuple(p.resolve() for p in self.opts.smoke_with),
                    tier=self.opts.smoke_tier,
                    deps=self.opts.smoke_deps or "system",
                    python=self.opts.smoke_python or section.get("python"),
                    index_url=section.get("index-url"),
                    report_path=report_path,
                    junit_path=smoke_dir / "junit.xml",
                    allow_missing_tiers=self.opts.allow_missing_tiers,
                ),
                copy,
            )
        except ForkpatchError as exc:
            return _failed("smoke", exc)
        rep = outcome.report
        failed = tuple(c["id"] for c in rep["checks"] if c["outcome"] in ("failed", "error"))
        droppable = self._droppable(copy, build)
        result = SmokeRun(
            passed=outcome.passed,
            tier=self.opts.smoke_tier,
            runner=runner,
            wheels=dict(build.wheels),
            report="smoke/report.json",
            tiers=dict(rep["tiers"]["status"]),
            not_run=dict(rep["tiers"]["not_run"]),
            checks={c["id"]: c["outcome"] for c in rep["checks"]},
            failed=failed,
            missing=dict(outcome.missing),
            droppable=droppable,
        )
        if outcome.passed and outcome.missing:
            return StageOutcome(result, stop=True, error=outcome.not_run_error())
        if outcome.passed:
            return StageOutcome(result)
        return StageOutcome(
            result,
            stop=True,
            error=SmokeError(
                f"{len(failed)} smoke check(s) failed: {', '.join(failed)}",
                tip=f"see {report_path}",
            ),
        )

    def _droppable(self, copy: Project, build: BuildDone) -> dict[str, dict[str, str]] | None:
        """The rebased series' drop-when conditions, evaluated on this runner (the same
        base wheel and smoke settings); None when the build had no base wheel."""
        from forkpatch.droppable import DroppableOptions, evaluate

        if build.base_wheel is None:
            return None
        section = copy.series.section("smoke")
        try:
            base_wheel = self.base_wheel(copy)
            if base_wheel is None:
                return None
            with log.step(f"forkpatch droppable (the series on {self.tag})"):
                result = evaluate(
                    copy,
                    DroppableOptions(
                        base_wheel=base_wheel,
                        deps=self.opts.smoke_deps or "system",
                        python=self.opts.smoke_python or section.get("python"),
                        index_url=section.get("index-url"),
                    ),
                )
        except ForkpatchError as exc:
            log.warn(f"droppable could not be evaluated: {exc}")
            return None
        return {
            v.name: {"verdict": v.verdict, "evidence": v.evidence.splitlines()[0][:300]}
            for v in result.patches
        }

    # ---------------------------------------------------------------- publish

    def stage_publish(self, stages: Stages) -> StageOutcome:
        target = self.opts.publish_to or self.copy().series.section("publish").get("to")
        if not self.opts.publish or not target:
            why = (
                "--no-publish"
                if not self.opts.publish
                else "no target (publish.to in series.yaml, or --publish-to)"
            )
            return StageOutcome(Skipped(why))
        smoke, build = stages.smoke, stages.build
        if smoke is None:
            return _out_of_order(
                UsageError(
                    f"cannot publish: no smoke result for {self.tag} in {self.dir}",
                    tip="run the smoke step first and pass its output directory along (--out)",
                )
            )
        if isinstance(smoke, SmokeRun) and smoke.status == "not-run":
            why = f"smoke tier(s) {', '.join(smoke.missing)} did not run"
            return StageOutcome(Skipped(why), stop=True)
        if not (isinstance(smoke, SmokeRun) and smoke.passed and isinstance(build, BuildDone)):
            return StageOutcome(Skipped("the smoke suite did not pass"), stop=True)
        target_text = _public_target(str(target))
        done = stages.publish
        if (
            isinstance(done, PublishDone)
            and done.target == target_text
            and done.wheels == build.wheels
        ):
            log.info(f"publish for {self.tag}: already done to {target_text}")
            return StageOutcome(done)
        return self._publish(str(target), build, smoke)

    def _publish(self, target: str, build: BuildDone, smoke: SmokeRun) -> StageOutcome:
        from forkpatch.publish import PublishOptions, check_uploader, publish

        target_text = _public_target(target)
        wheels = tuple(self.dir / "dist" / name for name in build.wheels)
        try:
            check_uploader(target)
            published = publish(
                PublishOptions(
                    wheels=wheels,
                    to=target,
                    allow_missing_tiers=self.opts.allow_missing_tiers,
                    reports=(self.dir / smoke.report,),
                ),
                self.copy(),
            )
        except ForkpatchError as exc:
            return _failed("publish", exc, target=target_text)
        return StageOutcome(
            PublishDone(
                target=target_text,
                wheels=dict(build.wheels),
                actions={p.file: p.action for p in published},
                allowed_missing_tiers=tuple(sorted({t for p in published for t in p.overrides})),
            )
        )


def _public_target(target: str) -> str:
    """The target without credentials (publish refuses them anyway; never echo them)."""
    parts = urllib.parse.urlsplit(target)
    if parts.password or parts.username:
        netloc = parts.hostname or ""
        if parts.port:
            netloc += f":{parts.port}"
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    return target


def _files_match(directory: Path, wheels: Mapping[str, str]) -> bool:
    return bool(wheels) and all(
        (directory / n).is_file() and file_sha256(directory / n) == s for n, s in wheels.items()
    )


# The base wheel: at most this large, downloaded within this time.
BASE_WHEEL_LIMIT = 8 << 30
BASE_WHEEL_DEADLINE_S = 1800.0


def _download(url: str, dest_dir: Path) -> Path:
    name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
    if not name.endswith(".whl"):
        raise BuildError(
            f"the base wheel URL {url} does not name a .whl file",
            tip="give the URL of the wheel itself",
        )
    dest = dest_dir / name
    if dest.is_file():
        return dest
    dest_dir.mkdir(parents=True, exist_ok=True)
    fetcher = Fetcher.for_command(
        "the download", request_s=BASE_WHEEL_DEADLINE_S, command_s=BASE_WHEEL_DEADLINE_S
    )
    with log.step(f"download the base wheel {strip_url_credentials(url)}"):
        try:
            fetcher.download(url, dest, limit=BASE_WHEEL_LIMIT)
        except FetchError as exc:
            raise BuildError(
                f"cannot download the base wheel: {exc.message}",
                tip="check the URL (build.base-wheel / --base-wheel) and the network",
            ) from None
    return dest


def _conflict_stage(plan: Mapping[str, Any], fc: Forecast | None) -> RebaseConflict:
    outcomes = plan["patches"]
    first = next(o for o in outcomes if o["status"] == "conflict")
    return RebaseConflict(
        relation=plan.get("relation"),
        conflict=ConflictEntry.from_outcome(first),
        # Above the first conflict: forecast as if it were skipped (rebase.plan.Forecast).
        blocked=tuple(o["name"] for o in outcomes[outcomes.index(first) + 1 :]),
        patches={o["name"]: o["status"] for o in outcomes},
        forecast=fc,
    )


# =========================================================================== summary


def _code(text: Any) -> str:
    return md_code(str(text))


def _not_done(result: Skipped | Failed) -> list[str]:
    text = result.reason if isinstance(result, Skipped) else result.error
    tip = result.tip if isinstance(result, Failed) else None
    return [f"- {result.status}: {md_cell(text)}", *([f"- tip: {md_cell(tip)}"] if tip else []), ""]


def summary_markdown(state: RunState, work: Path | None = None) -> str:
    """The pull/merge request (or issue) body. Deterministic: no times, no durations.

    ``work``: the run's directory, where the rebase report is read from. The body
    ends with the ``forkpatch-state`` comment that a later run reads back.
    """
    info, stages = state.info, state.stages
    tag = info.tag
    out = [f"# forkpatch: {info.base_tag} → {tag} ({state.status})", ""]
    out.append(f"- fork: {info.fork_name} ({info.fork_url})")
    out.append(
        f"- new release: {_code(tag)} (`{info.key.commit[:12]}`), series base "
        f"{_code(info.base_tag)} (`{info.base_commit[:12]}`)"
    )
    newer = [t["tag"] + (" (held back)" if t.get("held_back") else "") for t in info.newer]
    if len(newer) > 1:
        out.append(f"- newer tags: {', '.join(newer)}")
    out.append(f"- bot branch: {_code(info.branch)}")
    out.append(
        f"- inputs: series sha256 `{info.key.series_sha256[:16]}`, "
        f"forkpatch {info.forkpatch_version}"
    )
    out.append("")
    out += _rebase_section(info, stages.rebase, work)
    out += _build_section(stages.build)
    out += _smoke_section(stages)
    out += _droppable_section(tag, stages)
    out += _publish_section(stages.publish)
    fc = stages.rebase.forecast if isinstance(stages.rebase, (RebaseDone, RebaseConflict)) else None
    if fc:
        out += ["## Forecast: the fork's default branch", ""]
        head = f"{_code(fc.branch)} at `{fc.commit[:12]}`"
        if fc.ok:
            out.append(f"- the series applies to {head} without conflicts")
        for c in fc.conflicts:
            out.append(
                f"- {_code(c.patch)} would conflict on {head}: "
                + "; ".join(_hunks_text(x) for x in c.conflicts)
            )
        out.append("")
    out.append(state_marker(state))
    return "\n".join(out).rstrip("\n") + "\n"


def _hunks_text(c: ConflictSpot) -> str:
    hunks = c.hunks
    where = f"hunk{'s' if len(hunks) > 1 else ''} {', '.join(map(str, hunks))} of " if hunks else ""
    line = f" (near line {c.line})" if c.line else ""
    return f"{where}{_code(c.path)}{line}"


def _rebase_section(info: RunInfo, st: RebaseResult | None, work: Path | None) -> list[str]:
    out = ["## Rebase", ""]
    if st is None:
        return [*out, "- not run yet", ""]
    if isinstance(st, RebaseConflict):
        return out + _conflict_section(info, st)
    if isinstance(st, (Skipped, Failed)):
        return out + _not_done(st)
    counts = ", ".join(f"{n} {s}" for s, n in st.summary.items())
    out.append(f"- {len(st.patches)} patch(es): {counts}")
    if st.note:
        out.append(f"- **note:** {md_cell(st.note)}")
    out.append("")
    out.append("<details><summary>Rebase report</summary>")
    out.append("")
    report_md = _read_rebase_markdown(work, st)
    # The report has its own title; one level down inside this summary.
    out += [re.sub(r"^(#+) ", r"#\1 ", line) for line in report_md.rstrip("\n").splitlines()]
    out += ["", "</details>", ""]
    return out


def _conflict_section(info: RunInfo, st: RebaseConflict) -> list[str]:
    tag, c = info.tag, st.conflict
    out = [
        (
            f"**The series does not rebase cleanly onto {_code(tag)}.** Patch "
            f"{_code(c.patch)} conflicts; nothing was built or published."
        ),
        "",
        "| file | hunks | line | reason |",
        "|---|---|---|---|",
    ]
    for x in c.conflicts:
        out.append(
            f"| {_code(x.path)} | {', '.join(map(str, x.hunks)) or '-'} | "
            f"{x.line or '-'} | {md_cell(x.reason)} |"
        )
    if st.blocked:
        out += [
            "",
            "After it (forecast as if it were skipped; `forkpatch check --onto` says which "
            "depend on it): "
            + ", ".join(f"{_code(b)} {st.patches.get(b, '?')}" for b in st.blocked),
        ]
    others = {n: s for n, s in st.patches.items() if n not in st.blocked and n != c.patch}
    if others:
        out += ["", "Before it: " + ", ".join(f"{_code(n)} {s}" for n, s in others.items())]
    first = c.conflicts[0].path if c.conflicts else "..."
    return [
        *out,
        "",
        "### Resolve it locally",
        "",
        "```sh",
        "git switch -c " + info.branch,
        f"forkpatch rebase --onto {tag}      # stops at the conflict (a work tree)",
        f"$EDITOR .forkpatch/rebase-worktree/{first}",
        "forkpatch rebase --continue        # or --skip to drop the patch, --abort",
        f"forkpatch track --run --tag {tag} --no-publish   # build + smoke it",
        "git add -A series.yaml patches",
        f"git commit -m 'Rebase the series onto {tag}' && git push",
        "```",
        "",
    ]


def _read_rebase_markdown(work: Path | None, st: RebaseDone) -> str:
    try:
        if work is None:
            raise OSError
        return read_regular(work / st.report_markdown).decode("utf-8", errors="replace")
    except OSError:
        return f"(the report is in {st.report_markdown})\n"


def _build_section(st: BuildResult | None) -> list[str]:
    out = ["## Build", ""]
    if st is None:
        return [*out, "- not run yet", ""]
    if not isinstance(st, BuildDone):
        return out + _not_done(st)
    prov = st.provenance
    out.append(f"- version {_code(st.version)}, {st.mode} build ({st.reason})")
    if st.base_wheel:
        out.append(f"- base wheel: {_code(st.base_wheel)}")
    out.append(
        f"- source: {prov.get('fork_url')} {_code(prov.get('tag'))} "
        f"(`{str(prov.get('commit'))[:12]}`)"
    )
    out += ["", "| wheel | sha256 |", "|---|---|"]
    for name, sha in st.wheels.items():
        out.append(f"| {_code(name)} | `{sha}` |")
    out += ["", "| patch | sha256 / build step |", "|---|---|"]
    for p in prov.get("patches", []):
        out.append(
            f"| {_code(p['name'])} | "
            f"{('`' + p['sha256'][:16] + '`') if p.get('sha256') else p.get('build_step')}"
            " |"
        )
    out.append("")
    return out


def _smoke_section(stages: Stages) -> list[str]:
    out = ["## Smoke", ""]
    st = stages.smoke
    if st is None:
        if isinstance(stages.build, BuildDone):
            return [
                *out,
                (
                    "- **smoke not run** yet: the SM70 runner has not reported. Do not merge "
                    "before it has (this description is updated when it does)."
                ),
                "",
            ]
        return [*out, "- not run yet (runs on the SM70 runner)", ""]
    if not isinstance(st, SmokeRun):
        return out + _not_done(st)
    verdict = {"done": "passed", "failed": "**FAILED**", "not-run": "**NOT RUN**"}[st.status]
    out.append(f"- {verdict} (requested up to tier {st.tier}, runner {st.runner})")
    # In a fixed order: the stage file keeps its keys sorted, and the body must not
    # change between the run that made it and one that reads it back.
    order = {t: i for i, t in enumerate(("static", "gpu", "sm70", "gpu-jit"))}
    for tier, missing in sorted(st.missing.items(), key=lambda kv: (order.get(kv[0], 9), kv[0])):
        out.append(f"- **tier {tier} {missing}**: do not merge before it has run")
    for tier, s in sorted(st.tiers.items(), key=lambda kv: (order.get(kv[0], 9), kv[0])):
        why = st.not_run.get(tier)
        out.append(f"- tier {tier}: {s}" + (f" ({why})" if why else ""))
    out += ["", "| check | outcome |", "|---|---|"]
    for cid, outcome in sorted(st.checks.items()):
        out.append(f"| {_code(cid)} | {outcome if outcome != 'failed' else '**failed**'} |")
    out.append("")
    return out


def _upstream(copy: Project, entries: Sequence[PatchEntry]) -> dict[str, dict[str, str]] | None:
    """The patches' upstream states (the forge asked now, or the last known answer)."""
    from forkpatch.upstream_status import upstream_states

    try:
        states = upstream_states(copy, entries)
    except ForkpatchError as exc:
        log.warn(f"upstream states not known: {exc}")
        return None
    keep = ("state", "url", "release", "reason")
    return {n: {k: str(v[k]) for k in keep if k in v} for n, v in states.items()}


def _upstream_lines(rebase: RebaseDone) -> list[str]:
    if not rebase.upstream:
        return []
    out = ["", "Upstream (what each patch sent upstream became):", ""]
    # By name: the stage file keeps its keys sorted, and the body must not change
    # between the run that made it and one that reads it back.
    for name, up in sorted(rebase.upstream.items()):
        text = up.get("state", "unknown")
        if up.get("release"):
            text += f", {up['release'] if up['release'] == 'not yet released' else 'in ' + up['release']}"
        if up.get("reason"):
            text += f" ({up['reason']})"
        out.append(f"- {_code(name)}: {text.replace('`', chr(39))}")
    return out


def _droppable_section(tag: str, stages: Stages) -> list[str]:
    """Which patches the release makes droppable: the rebase's upstreamed ones, and the
    drop-when conditions the smoke runner evaluated (``forkpatch droppable``)."""
    rebase = stages.rebase
    if not isinstance(rebase, RebaseDone):
        return []
    out = [f"## Droppable at {tag}", ""]
    for name, status in sorted(rebase.patches.items()):
        if status == "upstreamed":
            out.append(
                f"- {_code(name)}: **droppable**, upstreamed at {_code(tag)} (the rebase dropped it)"
            )
    smoke = stages.smoke
    verdicts = smoke.droppable if isinstance(smoke, SmokeRun) else None
    if verdicts is None:
        out.append(
            "- the other patches' drop-when conditions: not evaluated (no smoke run with a "
            f"base wheel; `forkpatch droppable --onto {tag} --base-wheel WHEEL` evaluates them)"
        )
    else:
        for name, v in sorted(verdicts.items()):  # by name, as the stage file keeps them
            verdict = v.get("verdict", "?")
            shown = f"**{verdict}**" if verdict == "droppable" else verdict
            evidence = str(v.get("evidence", "")).replace("`", "'")
            out.append(f"- {_code(name)}: {shown}: {_code(evidence)}")
    out += _upstream_lines(rebase)
    out.append("")
    return out


def _publish_section(st: PublishResult | None) -> list[str]:
    out = ["## Publish", ""]
    if st is None:
        return [*out, "- not run yet", ""]
    if not isinstance(st, PublishDone):
        return out + _not_done(st)
    out.append(f"- to {st.target}")
    for name in st.wheels:
        out.append(f"- {_code(name)}: published")
    if st.allowed_missing_tiers:
        out.append(
            f"- **published without tier(s)** {', '.join(st.allowed_missing_tiers)} "
            "(--allow-missing-tier)"
        )
    out.append("")
    return out


# =========================================================================== change


@dataclass(frozen=True)
class Change:
    """What the pull/merge request (or issue) for a run should be."""

    kind: str  # "pull" | "issue" | "none"
    tag: str
    status: str
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


def load_run(project: Project, out_dir: Path | None, tag: str | None) -> tuple[Path, RunState]:
    """The work directory and the state of the last run (or of ``tag``'s)."""
    root = out_root(project, out_dir)
    if tag is None:
        try:
            name = (root / LATEST_FILE).read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            raise UsageError(
                f"no `forkpatch track --run` output in {root}",
                tip="run `forkpatch track --run` first, or pass --out",
            ) from None
    else:
        name = safe_name(tag)
    work = WorkDir(root / name)
    info = work.load_info()
    if info is None:
        raise UsageError(
            f"no result for {tag or name} in {work.path}",
            tip="run `forkpatch track --run` first, or pass --out / --tag",
        )
    state = RunState(info=info, stages=work.load_stages())
    work.save_views(state)
    return work.path, state


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


__all__ = [
    "BuildDone",
    "Change",
    "Failed",
    "Forecast",
    "PublishDone",
    "RebaseConflict",
    "RebaseDone",
    "RunInfo",
    "RunKey",
    "RunOptions",
    "RunResult",
    "RunState",
    "Skipped",
    "SmokeRun",
    "Stages",
    "TagInfo",
    "TrackReport",
    "forecast",
    "list_releases",
    "parse_state_marker",
    "pick_tag",
    "prepare_change",
    "run",
    "summary_markdown",
]
