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
publish, each a *stage* recorded in ``result.json`` and rendered into
``summary.md`` (a pull/merge request body). A stage already done for the same
inputs (the target tag's commit and the bytes of series.yaml + patches/) is
not done again, so a second run is a no-op and a pipeline can run the stages
on different machines (``steps``), passing the directory along.

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
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from forkpatch import __version__, log
from forkpatch.errors import (
    BuildError,
    ConflictError,
    ForkpatchError,
    ForkRepoError,
    GitError,
    SeriesError,
    SmokeError,
    UsageError,
)
from forkpatch.fsutil import atomic_write, file_sha256
from forkpatch.git import Git
from forkpatch.project import Project
from forkpatch.series import PATCHES_DIR, SERIES_FILE

DEFAULT_PATTERN = r"^v(?P<version>.+)$"
DEFAULT_BOT_BRANCH = "forkpatch/rebase-{tag}"
DEFAULT_OUT = "track"  # under the project's .forkpatch/
RESULT_FILE = "result.json"
SUMMARY_FILE = "summary.md"
CHANGE_BODY_FILE = "change-body.md"
MAX_BODY = 60_000
LATEST_FILE = "latest"
RESULT_VERSION = 1
STEPS = ("rebase", "build", "smoke", "publish")

# Exit codes of `forkpatch track` (documented in `forkpatch track --help`).
EXIT_UP_TO_DATE = 0
EXIT_NEW_RELEASE = 10


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
    forecast: dict[str, Any] | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_NEW_RELEASE if self.target is not None else EXIT_UP_TO_DATE

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
            "forecast": self.forecast,
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
    tags = project.fork().source_tags()
    report = TrackReport(base=series.base.tag, base_version=str(base_v))
    dates = _tag_dates(project) if min_age else {}
    candidates: list[tuple[Version, TagInfo]] = []
    for tag, commit in tags.items():
        v = parse_tag(tag, pattern)
        if v is None:
            report.ignored.append(tag)
            continue
        if isinstance(v, str):
            report.unparsable.append(tag)
            continue
        if v <= base_v:
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
    report.newer = [info for _, info in candidates]
    actionable = [info for info in report.newer if info.held_back is None]
    report.target = actionable[-1] if actionable else None
    report.unparsable.sort()
    report.ignored.sort()
    return report


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


def fork_branch_head(project: Project) -> tuple[str, str]:
    """(branch, commit) of the fork's default branch (or ``track.branch``), in the store."""
    from forkpatch.forkrepo import local_git_dir

    fork = project.fork()
    wanted = project.series.section("track").get("branch")
    if fork.local:
        src = Git(local_git_dir(fork.source))
        names: list[str] = []
        if wanted:
            names = [f"refs/remotes/origin/{wanted}", f"refs/heads/{wanted}"]
        else:
            for sym in ("refs/remotes/origin/HEAD", "HEAD"):
                proc = src.run("symbolic-ref", "-q", sym, check=False)
                if proc.returncode == 0:
                    names.append(proc.stdout.decode().strip())
            names += ["refs/heads/main", "refs/heads/master"]
        for ref in names:
            commit = src.commit_of(ref)
            if commit is not None:
                return re.sub(r"^refs/(remotes/origin|heads)/", "", ref), commit
        raise ForkRepoError(
            f"cannot find the default branch of the fork at {fork.source}"
            + (f" (track.branch: {wanted})" if wanted else ""),
            tip="set track.branch in series.yaml",
        )
    branch: str | None = wanted
    if not branch:
        proc = fork.store.run(
            "ls-remote", "--symref", fork.source, "HEAD", check=False, timeout=300
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


def forecast(project: Project) -> dict[str, Any]:
    """How the series fares on the head of the fork's default branch (changes nothing)."""
    from forkpatch import rebase as rb

    series = project.series
    fork = project.fork()
    branch, head = fork_branch_head(project)
    fork.verify_base(series.base.tag, series.base.commit)
    # The same classification as `check --onto` and the rebase, on a branch head.
    outcomes = rb.classify(project, rb.Target(branch, head)).outcomes
    conflicts = [_conflict_entry(o.to_json()) for o in outcomes if o.status == "conflict"]
    return {
        "branch": branch,
        "commit": head,
        "ok": not conflicts,
        "patches": {o.name: o.status for o in outcomes},
        "conflicts": conflicts,
    }


def _conflict_entry(outcome: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "patch": outcome["name"],
        "files": list(outcome.get("files", [])),
        "conflicts": [
            {
                "path": c["path"],
                "hunks": list(c.get("hunks") or []),
                "line": c.get("line"),
                "reason": c["reason"],
            }
            for c in outcome.get("conflicts", [])
        ],
    }


# =========================================================================== run


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


@dataclass
class RunResult:
    data: dict[str, Any]
    work_dir: Path | None
    error: ForkpatchError | None = None

    @property
    def status(self) -> str:
        return str(self.data["status"])


def series_digest(project: Project) -> str:
    """sha256 over series.yaml and every file in patches/: the run's input identity."""
    h = hashlib.sha256()
    files = [project.series_path]
    if project.patches_dir.is_dir():
        files += sorted(p for p in project.patches_dir.rglob("*") if p.is_file())
    for path in files:
        rel = path.relative_to(project.root).as_posix()
        data = path.read_bytes()
        h.update(f"{rel}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def safe_name(tag: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", tag)


def bot_branch(project: Project, tag: str) -> str:
    template = project.series.section("track").get("bot-branch", DEFAULT_BOT_BRANCH)
    return template.format(tag=tag, version=_version_of(tag))


def _version_of(tag: str) -> str:
    text = tag[1:] if tag[:1] in ("v", "V") else tag
    try:
        return str(Version(text))
    except InvalidVersion:
        return text


def out_root(project: Project, opts: RunOptions) -> Path:
    return (opts.out_dir or project.state_dir / DEFAULT_OUT).resolve()


def run(project: Project, opts: RunOptions) -> RunResult:
    """Act on the newest release (or ``opts.tag``): see the module docstring.

    Never raises for a stage that fails: the failure is recorded, the summary
    written, and the error returned in :attr:`RunResult.error` for the CLI.
    """
    for s in opts.steps:
        if s not in STEPS:
            raise UsageError(f"unknown step '{s}'", tip=f"steps: {', '.join(STEPS)}")
    report = list_releases(project)
    target = report.target
    if opts.tag:
        target = _pick_tag(project, report, opts.tag)
    if target is None:
        log.info(f"up to date: no release newer than {report.base} to act on")
        return RunResult(
            data={
                "version": RESULT_VERSION,
                "status": "up-to-date",
                "base": report.base,
                "track": report.to_json(),
            },
            work_dir=None,
        )
    root = out_root(project, opts)
    work = root / safe_name(target.tag)
    key = {"tag": target.tag, "commit": target.commit, "series_sha256": series_digest(project)}
    prev = _load_json(work / RESULT_FILE)
    if prev is not None and prev.get("key") != key:
        log.info(
            f"{work} holds a run for other inputs ({_key_text(prev.get('key'))}); starting over"
        )
        prev = None
    if prev is None and work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = prev or {
        "version": RESULT_VERSION,
        "key": key,
        "tag": target.tag,
        "tag_version": target.version,
        "tag_commit": target.commit,
        "base": {"tag": project.series.base.tag, "commit": project.series.base.commit},
        "fork": {"name": project.series.fork.name, "url": project.series.fork.url},
        "project": str(project.root),
        "branch": bot_branch(project, target.tag),
        "newer": [t.to_json() for t in report.newer],
        "stages": {},
        "status": "pending",
    }
    data["forkpatch_version"] = __version__
    atomic_write(root / LATEST_FILE, (work.name + "\n").encode())
    ctx = _RunCtx(project=project, opts=opts, work=work, data=data)
    error: ForkpatchError | None = None
    stopped: str | None = None
    try:
        for step in STEPS:
            if step not in opts.steps:
                continue
            if stopped is not None:
                # Results of an earlier run for these stages no longer hold.
                ctx.stages[step] = {
                    "status": "skipped",
                    "reason": _stop_reason(stopped, ctx.stages[stopped]),
                }
                continue
            if getattr(ctx, f"stage_{step}")():
                stopped = step
            ctx.save()
    except ForkpatchError as exc:  # a stage's own failure is recorded by the stage
        error = exc
    finally:
        ctx.finish()
    error = error or ctx.error
    return RunResult(data=data, work_dir=work, error=error)


def _stop_reason(stage: str, st: Mapping[str, Any]) -> str:
    if st.get("status") == "conflict":
        return "the rebase conflicts"
    if st.get("status") == "skipped":
        return f"{stage} was skipped ({st.get('reason')})"
    return f"the {stage} stage did not succeed"


def _pick_tag(project: Project, report: TrackReport, tag: str) -> TagInfo:
    for info in report.newer:
        if info.tag == tag:
            if info.held_back:
                log.warn(
                    f"{tag} is held back ({info.held_back}); acting on it because --tag names it"
                )
            return info
    tags = project.fork().source_tags()
    if tag not in tags:
        from forkpatch.forkrepo import nearest_tags

        raise UsageError(
            f"tag '{tag}' is not in the fork; nearest: "
            f"{', '.join(nearest_tags(tag, tags)) or 'none'}"
        )
    return TagInfo(tag=tag, version=_version_of(tag), commit=tags[tag])


def _key_text(key: Any) -> str:
    if not isinstance(key, Mapping):
        return "unknown"
    return (
        f"{key.get('tag')} at {str(key.get('commit'))[:12]}, series "
        f"{str(key.get('series_sha256'))[:12]}"
    )


def _load_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("version") == RESULT_VERSION else None


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
            timeout=30,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "cpu"
    caps = sorted({c.strip() for c in out.splitlines() if c.strip()})
    return "cuda:" + ",".join(caps) if caps else "cpu"


@dataclass
class _RunCtx:
    project: Project
    opts: RunOptions
    work: Path
    data: dict[str, Any]
    error: ForkpatchError | None = None
    _copy: Project | None = None

    # ---------------------------------------------------------------- plumbing

    @property
    def tag(self) -> str:
        return str(self.data["tag"])

    @property
    def stages(self) -> dict[str, Any]:
        return self.data["stages"]  # type: ignore[no-any-return]

    def save(self) -> None:
        self.data["status"] = overall_status(self.data)
        atomic_write(self.work / RESULT_FILE, _dump(self.data))

    def finish(self) -> None:
        self.save()
        atomic_write(self.work / SUMMARY_FILE, summary_markdown(self.data, self.work).encode())

    def fail(self, stage: str, exc: ForkpatchError, **extra: Any) -> bool:
        self.stages[stage] = {"status": "failed", "error": exc.message, "tip": exc.tip, **extra}
        self.error = exc
        log.error(f"{stage}: {exc.message}")
        return True

    def copy(self) -> Project:
        """The project as this run sees it: ``<work>/project`` (series.yaml + patches/).

        Its private store borrows the objects of the project's own store, so no
        second fetch of the fork happens and the copy works on any machine where
        the project can reach the fork.
        """
        if self._copy is None:
            dest = self.work / "project"
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

    def prepare_store(self, *tags: str) -> None:
        """Make sure the project's store holds the tags the copy will ask for."""
        fork = self.project.fork()
        series = self.project.series
        fork.verify_base(series.base.tag, series.base.commit)
        for t in tags:
            fork.resolve_tag(t)

    # ---------------------------------------------------------------- stages

    def stage_rebase(self) -> bool:
        done = self.stages.get("rebase")
        if (
            done
            and done.get("status") in ("done", "conflict")
            and (self.work / "project" / SERIES_FILE).is_file()
        ):
            log.info(f"rebase onto {self.tag}: already {done['status']} (in {self.work})")
            return done["status"] == "conflict"
        from forkpatch import rebase as rb

        if self.opts.forecast:
            with contextlib.suppress(ForkpatchError):
                self.data["forecast"] = forecast(self.project)
        try:
            self.prepare_store(self.tag)
            copy = self.copy()
            with log.step(f"forkpatch check --onto {self.tag}"):
                plan = rb.check(copy, rb.RebaseOptions(onto=self.tag))
            if not plan.ok:
                self.stages["rebase"] = _conflict_stage(plan.to_json(), self.tag)
                self.error = ConflictError(
                    f"the series does not rebase cleanly onto {self.tag}: patch "
                    f"'{self.stages['rebase']['conflict']['patch']}' conflicts",
                    tip=f"the summary in {self.work / SUMMARY_FILE} says what to run locally",
                )
                return True
            report_dir = self.work / "rebase"
            with log.step(f"forkpatch rebase --onto {self.tag}"), copy.locked("rebase"):
                result = rb.rebase(copy, rb.RebaseOptions(onto=self.tag, report_dir=report_dir))
        except ConflictError as exc:  # check said clean but the rebase stopped: undo it
            with contextlib.suppress(ForkpatchError):
                rb.abort(self.copy())
            return self.fail("rebase", exc)
        except ForkpatchError as exc:
            return self.fail("rebase", exc)
        from forkpatch.rebase import report as report_mod

        stem = report_mod.file_stem(result.report)
        self.stages["rebase"] = {
            "status": "done",
            "relation": result.plan.relation,
            "note": result.plan.note,
            "summary": result.report["summary"],
            "patches": {o.name: o.status for o in result.plan.outcomes},
            "changed_files": result.written,
            "report": {"json": f"rebase/{stem}.json", "markdown": f"rebase/{stem}.md"},
            "series_sha256": series_digest(copy),
        }
        return False

    def _rebased(self, stage: str) -> Project | None:
        """The rebased copy, or None (recorded) when the rebase has not succeeded here."""
        rebase = self.stages.get("rebase", {})
        if rebase.get("status") != "done":
            if not rebase:  # asked out of order: say so, record nothing
                self.error = UsageError(
                    f"cannot {stage}: no rebase onto {self.tag} in {self.work}",
                    tip="run the rebase step first (`forkpatch track --run --steps rebase`) "
                    "and pass its output directory along (--out)",
                )
                return None
            why = (
                "the rebase conflicts"
                if rebase.get("status") == "conflict"
                else "the rebase failed"
            )
            self.stages[stage] = {"status": "skipped", "reason": why}
            return None
        copy = self.copy()
        if series_digest(copy) != rebase.get("series_sha256"):
            self.error = UsageError(
                f"{copy.root} was changed after the rebase", tip=f"remove {self.work} and run again"
            )
            self.stages[stage] = {"status": "failed", "error": self.error.message}
            return None
        return copy

    def stage_build(self) -> bool:
        copy = self._rebased("build")
        if copy is None:
            return True
        dist = self.work / "dist"
        done = self.stages.get("build")
        if done and done.get("status") == "done" and _files_match(dist, done["wheels"]):
            log.info(f"build for {self.tag}: already done ({', '.join(done['wheels'])})")
            return False
        from forkpatch.wheels.buildwheel import BuildOptions, build_wheel

        try:
            base_wheel = self.base_wheel(copy)
            self.prepare_store(self.tag)
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
            return self.fail("build", exc)
        prov = result.provenance.to_dict()
        self.stages["build"] = {
            "status": "done",
            "mode": result.mode,
            "reason": result.reason,
            "version": result.version,
            "wheels": {w.name: result.sha256[w.name] for w in result.wheels},
            "base_wheel": base_wheel.name if base_wheel else None,
            "provenance": prov,
        }
        return False

    def base_wheel(self, copy: Project) -> Path | None:
        """``--base-wheel`` or build.base-wheel, with {tag}/{version} filled in; URLs fetched."""
        raw = self.opts.base_wheel or copy.series.section("build").get("base-wheel")
        if not raw:
            return None
        text = raw.replace("{tag}", self.tag).replace("{version}", _version_of(self.tag))
        if re.match(r"^https?://", text):
            return _download(text, self.work / "base-wheel")
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

    def stage_smoke(self) -> bool:
        build = self.stages.get("build", {})
        if not build:
            self.error = UsageError(
                f"cannot smoke: no build for {self.tag} in {self.work}",
                tip="run the build step first and pass its output directory along (--out)",
            )
            return True
        if build.get("status") != "done":
            self.stages["smoke"] = {"status": "skipped", "reason": "nothing was built"}
            return True
        copy = self.copy()
        dist = self.work / "dist"
        if not _files_match(dist, build["wheels"]):
            return self.fail(
                "smoke",
                SmokeError(
                    f"the wheels in {dist} are not the ones the build made",
                    tip=f"remove {self.work} and run again",
                ),
            )
        runner = runner_class()
        wheels = tuple(dist / name for name in build["wheels"])
        done = self.stages.get("smoke")
        if (
            done
            and done.get("status") == "done"
            and done.get("wheels") == build["wheels"]
            and done.get("tier") == self.opts.smoke_tier
            and done.get("runner") == runner
        ):
            log.info(f"smoke for {self.tag}: already done on this kind of runner ({runner})")
            return False
        from forkpatch.smoke import SmokeOptions, run_smoke

        section = copy.series.section("smoke")
        smoke_dir = self.work / "smoke"
        smoke_dir.mkdir(exist_ok=True)
        report_path = smoke_dir / "report.json"
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
                ),
                copy,
            )
        except ForkpatchError as exc:
            return self.fail("smoke", exc)
        rep = outcome.report
        failed = [c["id"] for c in rep["checks"] if c["outcome"] in ("failed", "error")]
        self.stages["smoke"] = {
            "status": "done" if outcome.passed else "failed",
            "passed": outcome.passed,
            "tier": self.opts.smoke_tier,
            "runner": runner,
            "wheels": build["wheels"],
            "report": "smoke/report.json",
            "tiers": rep["tiers"]["status"],
            "not_run": rep["tiers"]["not_run"],
            "checks": {c["id"]: c["outcome"] for c in rep["checks"]},
            "failed": failed,
        }
        if not outcome.passed:
            self.error = SmokeError(
                f"{len(failed)} smoke check(s) failed: {', '.join(failed)}",
                tip=f"see {report_path}",
            )
            return True
        return False

    def stage_publish(self) -> bool:
        smoke = self.stages.get("smoke", {})
        copy = self.copy()
        target = self.opts.publish_to or copy.series.section("publish").get("to")
        if not self.opts.publish or not target:
            why = (
                "--no-publish"
                if not self.opts.publish
                else "no target (publish.to in series.yaml, or --publish-to)"
            )
            self.stages["publish"] = {"status": "skipped", "reason": why}
            return False
        if not smoke:
            self.error = UsageError(
                f"cannot publish: no smoke result for {self.tag} in {self.work}",
                tip="run the smoke step first and pass its output directory along (--out)",
            )
            return True
        if smoke.get("status") != "done":
            self.stages["publish"] = {"status": "skipped", "reason": "the smoke suite did not pass"}
            return True
        build = self.stages["build"]
        target_text = _public_target(str(target))
        done = self.stages.get("publish")
        if (
            done
            and done.get("status") == "done"
            and done.get("target") == target_text
            and done.get("wheels") == build["wheels"]
        ):
            log.info(f"publish for {self.tag}: already done to {target_text}")
            return False
        from forkpatch.publish import PublishOptions, publish

        wheels = tuple(self.work / "dist" / name for name in build["wheels"])
        try:
            published = publish(
                PublishOptions(
                    wheels=wheels,
                    to=str(target),
                    allow_missing_tiers=self.opts.allow_missing_tiers,
                    reports=(self.work / smoke["report"],),
                ),
                copy,
            )
        except ForkpatchError as exc:
            return self.fail("publish", exc, target=target_text)
        self.stages["publish"] = {
            "status": "done",
            "target": target_text,
            "wheels": build["wheels"],
            "actions": {p.file: p.action for p in published},
            "allowed_missing_tiers": sorted({t for p in published for t in p.overrides}),
        }
        return False


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
    tmp = dest.with_suffix(".part")
    with log.step(f"download the base wheel {url}"):
        try:
            with urllib.request.urlopen(url, timeout=600) as resp, open(tmp, "wb") as fh:
                shutil.copyfileobj(resp, fh)
        except OSError as exc:
            raise BuildError(
                f"cannot download the base wheel {url}: {exc}",
                tip="check the URL (build.base-wheel / --base-wheel) and the network",
            ) from None
    os.replace(tmp, dest)
    return dest


def _conflict_stage(plan: Mapping[str, Any], tag: str) -> dict[str, Any]:
    outcomes = plan["patches"]
    at = next(i for i, o in enumerate(outcomes) if o["status"] == "conflict")
    return {
        "status": "conflict",
        "relation": plan.get("relation"),
        "conflict": _conflict_entry(outcomes[at]),
        # Above the conflict: forecast as if it were skipped (rebase.plan's Forecast).
        "blocked": [o["name"] for o in outcomes[at + 1 :]],
        "forecast": {
            o["name"]: {
                "status": o["status"],
                "depends_on": list(o.get("forecast", {}).get("depends_on", [])),
            }
            for o in outcomes[at + 1 :]
        },
        "patches": {o["name"]: o["status"] for o in outcomes},
    }


def overall_status(data: Mapping[str, Any]) -> str:
    """conflict | failed | published | smoked | built | rebased | pending."""
    stages = data.get("stages", {})
    states = {k: v.get("status") for k, v in stages.items()}
    if states.get("rebase") == "conflict":
        return "conflict"
    if "failed" in states.values():
        return "failed"
    if states.get("smoke") == "done" and not stages.get("smoke", {}).get("passed", True):
        return "failed"
    for stage, name in (
        ("publish", "published"),
        ("smoke", "smoked"),
        ("build", "built"),
        ("rebase", "rebased"),
    ):
        if states.get(stage) == "done":
            return name
    return "pending"


# =========================================================================== summary


def _code(text: Any) -> str:
    return f"`{text}`"


def summary_markdown(data: Mapping[str, Any], work: Path | None = None) -> str:
    """The pull/merge request (or issue) body. Deterministic: no times, no durations.

    ``work``: the run's directory, where the rebase report is read from.
    """
    tag = data["tag"]
    base = data["base"]
    stages = data.get("stages", {})
    status = data.get("status", overall_status(data))
    out = [f"# forkpatch: {base['tag']} → {tag} ({status})", ""]
    out.append(f"- fork: {data['fork']['name']} ({data['fork']['url']})")
    out.append(
        f"- new release: {_code(tag)} (`{data['tag_commit'][:12]}`), series base "
        f"{_code(base['tag'])} (`{base['commit'][:12]}`)"
    )
    newer = [
        t["tag"] + (" (held back)" if t.get("held_back") else "") for t in data.get("newer", [])
    ]
    if len(newer) > 1:
        out.append(f"- newer tags: {', '.join(newer)}")
    out.append(f"- bot branch: {_code(data['branch'])}")
    out.append(
        f"- inputs: series sha256 `{data['key']['series_sha256'][:16]}`, "
        f"forkpatch {data.get('forkpatch_version', '?')}"
    )
    out.append("")
    out += _rebase_section(data, stages.get("rebase"), work)
    out += _build_section(stages.get("build"))
    out += _smoke_section(stages.get("smoke"))
    out += _publish_section(stages.get("publish"))
    fc = data.get("forecast")
    if fc:
        out += ["## Forecast: the fork's default branch", ""]
        head = f"`{fc['branch']}` at `{fc['commit'][:12]}`"
        if fc["ok"]:
            out.append(f"- the series applies to {head} without conflicts")
        else:
            for c in fc["conflicts"]:
                out.append(
                    f"- {_code(c['patch'])} would conflict on {head}: "
                    + "; ".join(_hunks_text(x) for x in c["conflicts"])
                )
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def _hunks_text(c: Mapping[str, Any]) -> str:
    hunks = c.get("hunks") or []
    where = f"hunk{'s' if len(hunks) > 1 else ''} {', '.join(map(str, hunks))} of " if hunks else ""
    line = f" (near line {c['line']})" if c.get("line") else ""
    return f"{where}{_code(c['path'])}{line}"


def _rebase_section(
    data: Mapping[str, Any], st: Mapping[str, Any] | None, work: Path | None
) -> list[str]:
    tag = data["tag"]
    out = ["## Rebase", ""]
    if not st:
        return [*out, "- not run yet", ""]
    if st["status"] == "conflict":
        c = st["conflict"]
        out.append(
            f"**The series does not rebase cleanly onto {_code(tag)}.** Patch "
            f"{_code(c['patch'])} conflicts; nothing was built or published."
        )
        out.append("")
        out.append("| file | hunks | line | reason |")
        out.append("|---|---|---|---|")
        for x in c["conflicts"]:
            out.append(
                f"| {_code(x['path'])} | {', '.join(map(str, x['hunks'])) or '-'} | "
                f"{x.get('line') or '-'} | {x['reason'].replace('|', '/')} |"
            )
        if st.get("blocked"):
            after = st.get("forecast", {})
            out += [
                "",
                "After it (forecast as if it were skipped): "
                + ", ".join(
                    f"{_code(b)} {after.get(b, {}).get('status', '?')}"
                    + (" (shares files with it)" if after.get(b, {}).get("depends_on") else "")
                    for b in st["blocked"]
                ),
            ]
        names = list(st.get("patches", {}))
        below = names[: names.index(c["patch"])] if c["patch"] in names else []
        others = {n: st["patches"][n] for n in below}
        if others:
            out += ["", "Before it: " + ", ".join(f"{_code(n)} {s}" for n, s in others.items())]
        out += [
            "",
            "### Resolve it locally",
            "",
            "```sh",
            "git switch -c " + data["branch"],
            f"forkpatch rebase --onto {tag}      # stops at the conflict (a work tree)",
            f"$EDITOR .forkpatch/rebase-worktree/{c['conflicts'][0]['path']}"
            if c["conflicts"]
            else "$EDITOR .forkpatch/rebase-worktree/...",
            "forkpatch rebase --continue        # or --skip to drop the patch, --abort",
            f"forkpatch track --run --tag {tag} --no-publish   # build + smoke it",
            "git add -A series.yaml patches",
            f"git commit -m 'Rebase the series onto {tag}' && git push",
            "```",
            "",
        ]
        return out
    if st["status"] in ("failed", "skipped"):
        return [
            *out,
            f"- {st['status']}: {st.get('error') or st.get('reason')}",
            *([f"- tip: {st['tip']}"] if st.get("tip") else []),
            "",
        ]
    counts = ", ".join(f"{n} {s}" for s, n in st["summary"].items())
    out.append(f"- {len(st['patches'])} patch(es): {counts}")
    if st.get("note"):
        out.append(f"- **note:** {st['note']}")
    out.append("")
    out.append("<details><summary>Rebase report</summary>")
    out.append("")
    report_md = _read_rebase_markdown(work, st)
    # The report has its own title; one level down inside this summary.
    out += [re.sub(r"^(#+) ", r"#\1 ", line) for line in report_md.rstrip("\n").splitlines()]
    out += ["", "</details>", ""]
    return out


def _read_rebase_markdown(work: Path | None, st: Mapping[str, Any]) -> str:
    try:
        if work is None:
            raise OSError
        return (work / st["report"]["markdown"]).read_text()
    except OSError:
        return f"(the report is in {st['report']['markdown']})\n"


def _build_section(st: Mapping[str, Any] | None) -> list[str]:
    out = ["## Build", ""]
    if not st:
        return [*out, "- not run yet", ""]
    if st["status"] != "done":
        return [
            *out,
            f"- {st['status']}: {st.get('error') or st.get('reason')}",
            *([f"- tip: {st['tip']}"] if st.get("tip") else []),
            "",
        ]
    prov = st["provenance"]
    out.append(f"- version {_code(st['version'])}, {st['mode']} build ({st['reason']})")
    if st.get("base_wheel"):
        out.append(f"- base wheel: {_code(st['base_wheel'])}")
    out.append(
        f"- source: {prov.get('fork_url')} {_code(prov.get('tag'))} "
        f"(`{str(prov.get('commit'))[:12]}`)"
    )
    out += ["", "| wheel | sha256 |", "|---|---|"]
    for name, sha in st["wheels"].items():
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


def _smoke_section(st: Mapping[str, Any] | None) -> list[str]:
    out = ["## Smoke", ""]
    if not st:
        return [*out, "- not run yet (runs on the SM70 runner)", ""]
    if "tiers" not in st:
        return [
            *out,
            f"- {st['status']}: {st.get('error') or st.get('reason')}",
            *([f"- tip: {st['tip']}"] if st.get("tip") else []),
            "",
        ]
    out.append(
        f"- {'passed' if st['passed'] else '**FAILED**'} (requested up to tier "
        f"{st['tier']}, runner {st['runner']})"
    )
    for tier, s in st["tiers"].items():
        why = st.get("not_run", {}).get(tier)
        out.append(f"- tier {tier}: {s}" + (f" ({why})" if why else ""))
    out += ["", "| check | outcome |", "|---|---|"]
    for cid, outcome in st["checks"].items():
        out.append(f"| {_code(cid)} | {outcome if outcome != 'failed' else '**failed**'} |")
    out.append("")
    return out


def _publish_section(st: Mapping[str, Any] | None) -> list[str]:
    out = ["## Publish", ""]
    if not st:
        return [*out, "- not run yet", ""]
    if st["status"] != "done":
        return [
            *out,
            f"- {st['status']}: {st.get('error') or st.get('reason')}",
            *([f"- tip: {st['tip']}"] if st.get("tip") else []),
            "",
        ]
    out.append(f"- to {st['target']}")
    for name in st["wheels"]:
        out.append(f"- {_code(name)}: published")
    if st.get("allowed_missing_tiers"):
        out.append(
            f"- **published without tier(s)** {', '.join(st['allowed_missing_tiers'])} "
            "(--allow-missing-tier)"
        )
    out.append("")
    return out


# =========================================================================== change


@dataclass
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


def load_run(project: Project, out_dir: Path | None, tag: str | None) -> tuple[Path, dict]:
    root = out_root(project, RunOptions(out_dir=out_dir))
    if tag is None:
        try:
            name = (root / LATEST_FILE).read_text().strip()
        except FileNotFoundError:
            raise UsageError(
                f"no `forkpatch track --run` output in {root}",
                tip="run `forkpatch track --run` first, or pass --out",
            ) from None
    else:
        name = safe_name(tag)
    work = root / name
    data = _load_json(work / RESULT_FILE)
    if data is None:
        raise UsageError(
            f"no result for {tag or name} in {work}",
            tip="run `forkpatch track --run` first, or pass --out / --tag",
        )
    return work, data


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
    work, data = load_run(project, out_dir, tag)
    status = overall_status(data)
    body = work / CHANGE_BODY_FILE
    text = summary_markdown(data, work)
    if len(text) > MAX_BODY:  # first leave out the full rebase report (range-diffs)
        text = summary_markdown(data, None)
    atomic_write(body, _bounded(text).encode())
    tag = data["tag"]
    if status == "conflict":
        c = data["stages"]["rebase"]["conflict"]
        return Change(
            kind="issue",
            tag=tag,
            status=status,
            body_file=body,
            title=f"forkpatch: patch '{c['patch']}' conflicts with {tag}",
        )
    if data["stages"].get("rebase", {}).get("status") != "done":
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
    git, prefix = _project_repo(project.root if repo is None else repo, project.root)
    head = git.commit_of("HEAD")
    if head is None:
        raise GitError(
            f"{git.git_dir}: the repository has no commit yet", tip="commit the project first"
        )
    copy_root = work / "project"
    # The message does not depend on how far the stages got: same series, same commit.
    commit = _commit_series(
        git,
        head,
        prefix,
        copy_root,
        f"forkpatch: rebase the series onto {tag}\n\n{_commit_body(data)}",
    )
    branch = data["branch"]
    ref = f"refs/heads/{branch}"
    old = git.commit_of(ref)
    updated = old != commit
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


def _bounded(text: str) -> str:
    """The body within what GitHub (65,536) and GitLab (1,000,000) accept."""
    if len(text) <= MAX_BODY:
        return text
    note = (
        f"\n\n*(cut at {MAX_BODY} characters: the full summary is {SUMMARY_FILE} in the "
        "pipeline's forkpatch-out artifact)*\n"
    )
    return text[: MAX_BODY - len(note)].rsplit("\n", 1)[0] + note


def _commit_body(data: Mapping[str, Any]) -> str:
    st = data["stages"]["rebase"]
    counts = ", ".join(f"{n} {s}" for s, n in st["summary"].items())
    lines = [
        (f"From {data['base']['tag']} to {data['tag']} ({data['tag_commit'][:12]}): {counts}."),
        "",
    ]
    lines.append(f"Forkpatch-Track: {data['tag']} {data['tag_commit']}")
    return "\n".join(lines) + "\n"


def _project_repo(repo: Path, project_root: Path) -> tuple[Git, str]:
    """The repository's git dir and the project's path inside its work tree."""
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--absolute-git-dir", "--show-toplevel"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\n")
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
    return Git(git_dir), "" if prefix == "." else prefix


def _commit_series(git: Git, head: str, prefix: str, copy_root: Path, message: str) -> str:
    """HEAD's tree with series.yaml and patches/ replaced by the run's; one commit on HEAD."""
    from forkpatch.git import commit_date

    pre = f"{prefix}/" if prefix else ""
    index = git.git_dir / f"forkpatch-track-index-{os.getpid()}"
    env = {"GIT_INDEX_FILE": str(index)}
    try:
        git.run("read-tree", head, env=env)
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
        files = [copy_root / SERIES_FILE]
        patches = copy_root / PATCHES_DIR
        if patches.is_dir():
            files += sorted(p for p in patches.rglob("*") if p.is_file())
        lines = []
        for path in files:
            oid = git.hash_blob(path.read_bytes())
            rel = path.relative_to(copy_root).as_posix()
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
    if tree == git.tree_of(head):
        return head  # the project already holds exactly this series
    return git.commit_tree(tree, [head], message, date=commit_date(git, head))


__all__ = [
    "Change",
    "RunOptions",
    "RunResult",
    "TagInfo",
    "TrackReport",
    "forecast",
    "list_releases",
    "prepare_change",
    "run",
    "summary_markdown",
]
