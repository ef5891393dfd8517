"""Which fork releases are newer than the series' base, and which one to act on.

Tags come from the fork (``git ls-remote --tags`` for a URL, the refs of a local
clone), are selected with a pattern (series.yaml ``track.pattern``, default ``v`` + a
PEP 440 version), ordered with :mod:`packaging` and compared with the base.
Pre-releases are skipped unless ``track.prereleases`` is true; ``track.min-age-days``
holds back a tag younger than that. Tags that match the pattern but do not parse as
versions are reported, never guessed at.
"""

from __future__ import annotations

import calendar
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from forkpatch import log
from forkpatch.errors import NewRelease, SeriesError, UsageError
from forkpatch.kinds import ReleaseStatus
from forkpatch.project import Project
from forkpatch.track.forecast import BranchForecast

DEFAULT_PATTERN = r"^v(?P<version>.+)$"
DEFAULT_BOT_BRANCH = "forkpatch/rebase-{tag}"


DATE_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # a tag's date in JSON (UTC)


@dataclass(frozen=True)
class TagInfo:
    """A release tag newer than the base: its version, commit and date, and why it is
    not acted on when it is held back."""

    tag: str
    version: str
    commit: str
    date: float | None = None
    prerelease: bool = False
    held_back: str | None = None  # why it is not acted on (too young, pre-release)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tag": self.tag, "version": self.version, "commit": self.commit}
        if self.date is not None:
            out["date"] = time.strftime(DATE_FORMAT, time.gmtime(self.date))
        if self.prerelease:
            out["prerelease"] = True
        if self.held_back:
            out["held_back"] = self.held_back
        return out

    @classmethod
    def from_json(cls, raw: object) -> TagInfo:
        """Read back (run.json): raises KeyError, TypeError or ValueError when it is not one."""
        if not isinstance(raw, Mapping):
            raise TypeError(f"a tag is a mapping, not {type(raw).__name__}")
        date = raw.get("date")
        held_back = raw.get("held_back")
        return cls(
            tag=str(raw["tag"]),
            version=str(raw["version"]),
            commit=str(raw["commit"]),
            date=None if date is None else float(calendar.timegm(time.strptime(date, DATE_FORMAT))),
            prerelease=raw.get("prerelease") is True,
            held_back=None if held_back is None else str(held_back),
        )


@dataclass(frozen=True)
class TrackReport:
    """Where the series stands against the fork's releases."""

    base: str
    base_version: str | None
    newer: tuple[TagInfo, ...] = ()
    target: TagInfo | None = None
    unparsable: list[str] = field(default_factory=list)  # sorted
    ignored: list[str] = field(default_factory=list)  # sorted
    # Tags that name no commit (a tree, a blob): never a release -> what they name.
    not_commits: Mapping[str, str] = field(default_factory=dict)
    forecast: BranchForecast | None = None
    bot_branch: str | None = None  # the bot branch for the target

    @property
    def exit_code(self) -> int:
        return NewRelease.exit_code if self.target is not None else 0

    @property
    def status(self) -> ReleaseStatus:
        return "new-release" if self.target else "up-to-date"

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "base": self.base,
            "base_version": self.base_version,
            "newer": [t.to_json() for t in self.newer],
            "target": self.target.to_json() if self.target else None,
            "unparsable": list(self.unparsable),
            "ignored": list(self.ignored),
            "not_commits": dict(self.not_commits),
            "forecast": self.forecast.to_json() if self.forecast else None,
            "bot_branch": self.bot_branch,
        }


def _pattern_text(project: Project) -> str:
    return project.series.track.pattern or DEFAULT_PATTERN


def _pattern(project: Project) -> re.Pattern[str]:
    # Compiles: series.yaml's load refused a pattern that does not.
    return re.compile(_pattern_text(project))


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
    cfg = series.track
    pattern = _pattern(project)
    allow_pre = bool(cfg.prereleases)
    min_age = (cfg.min_age_days or 0.0) * 86400
    now = time.time() if now is None else now
    fork = project.fork()
    base_v = _base_release(project, pattern)
    tags, not_commits = fork.source_refs()
    dates = _tag_dates(project) if min_age else {}
    ignored: list[str] = []
    unparsable: list[str] = []
    passed_over: dict[str, str] = {}
    candidates: list[tuple[Version, TagInfo]] = []
    for tag, commit in sorted({**tags, **not_commits}.items()):
        v = parse_tag(tag, pattern)
        if v is None:
            ignored.append(tag)
            continue
        if isinstance(v, str):
            unparsable.append(tag)
            continue
        if v <= base_v:
            continue
        if tag in not_commits:
            _not_a_release(passed_over, tag, not_commits[tag])
            continue
        date = dates.get(tag)
        prerelease = v.is_prerelease or v.is_devrelease
        held_back = None
        if prerelease and not allow_pre:
            held_back = "pre-release (set track.prereleases: true to act on it)"
        elif min_age and date is not None and now - date < min_age:
            days = (now - date) / 86400
            held_back = f"only {days:.1f} day(s) old; track.min-age-days is {min_age / 86400:g}"
        info = TagInfo(tag, str(v), commit, date, prerelease, held_back)
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
        _not_a_release(passed_over, tag=gone.tag, kind=kind)
        candidates = [c for c in candidates if c[1] is not gone]
    target = actionable[-1] if actionable else None
    return TrackReport(
        base=series.base.label,
        base_version=str(base_v),
        newer=tuple(info for _, info in candidates),
        target=target,
        unparsable=sorted(unparsable),
        ignored=sorted(ignored),
        not_commits=passed_over,
        bot_branch=None if target is None else bot_branch(project, target.tag),
    )


def _base_release(project: Project, pattern: re.Pattern[str]) -> Version:
    """The release the series' base counts as: its tag's version, or for a base no
    release tag names (a branch head, a commit) the newest release at or below its
    commit, so that only releases past it are newer."""
    from forkpatch.baseversion import nearest_release

    base = project.series.base
    if base.tag:
        v = parse_tag(base.tag, pattern)
        if isinstance(v, Version):
            return v
    fork = project.fork()
    found = nearest_release(fork, base.commit, pattern.pattern)
    if found is not None:
        tag, release, distance = found
        if distance:
            log.info(
                f"base {base.describe()} is {distance} commit(s) past {tag}: releases newer "
                f"than {release} are newer than the base"
            )
        return release
    if base.tag and base.tag in fork.source_tags():
        raise SeriesError(
            f"series.yaml: the base tag '{base.tag}' does not match track.pattern "
            f"('{pattern.pattern}') or is not a PEP 440 version, and no release tag "
            "below it does",
            tip="set track.pattern so that its 'version' group captures it",
        )
    raise SeriesError(
        f"series.yaml: the base {base.describe()} ({base.commit[:12]}) has no release tag "
        f"matching track.pattern ('{pattern.pattern}') at or below it in the fork's history",
        tip=f"bring the fork's tags (`git -C {fork.source} fetch --tags`), deepen a "
        "shallow clone, or set track.pattern to the fork's release tags",
    )


def _not_a_release(passed_over: dict[str, str], tag: str, kind: str) -> None:
    passed_over[tag] = kind
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


def bot_branch(project: Project, tag: str) -> str:
    template = project.series.track.bot_branch or DEFAULT_BOT_BRANCH
    return template.format(tag=tag, version=version_of(tag))


def version_of(tag: str) -> str:
    text = tag[1:] if tag[:1] in ("v", "V") else tag
    try:
        return str(Version(text))
    except InvalidVersion:
        return text


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
            f"'{_pattern_text(project)}' as a PEP 440 "
            "version); acting on it because --tag names it, as for a pre-release"
        )
    elif report.base_version is not None and parsed <= Version(report.base_version):
        log.warn(
            f"{tag} is not newer than the base {report.base}; acting on it because --tag names it"
        )
    return TagInfo(tag=tag, version=version_of(tag), commit=tags[tag])
