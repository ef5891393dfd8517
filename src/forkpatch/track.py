"""Tracking fork releases: which tags are newer than the base, and which to act on.

Tags are listed from the fork (``git ls-remote --tags`` for a URL, the refs of
a local clone), selected with a pattern (series.yaml ``track.pattern``,
default ``v`` + a PEP 440 version), ordered with :mod:`packaging`, and compared
with the base. Pre-releases are skipped unless ``track.prereleases`` is true;
``track.min-age-days`` holds back a tag younger than that. Tags that match the
pattern but do not parse as versions are reported, never guessed at.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from forkpatch.errors import SeriesError
from forkpatch.project import Project

DEFAULT_PATTERN = r"^v(?P<version>.+)$"

# Exit codes of `forkpatch track` (documented in `forkpatch track --help`).
EXIT_UP_TO_DATE = 0
EXIT_NEW_RELEASE = 10


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

    def to_json(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "base_version": self.base_version,
            "newer": [t.to_json() for t in self.newer],
            "target": self.target.to_json() if self.target else None,
            "unparsable": self.unparsable,
            "ignored": self.ignored,
            "forecast": self.forecast,
            "status": "new-release" if self.target else "up-to-date",
        }


def _pattern(project: Project) -> re.Pattern[str]:
    raw = project.series.section("track").get("pattern", DEFAULT_PATTERN)
    try:
        pat = re.compile(raw)
    except re.error as exc:
        raise SeriesError(f"series.yaml: track.pattern '{raw}' is not a valid regular "
                          f"expression: {exc}") from None
    return pat


def parse_tag(tag: str, pattern: re.Pattern[str]) -> Version | None | bool:
    """The version a tag names; None when it matches but does not parse; False: no match."""
    m = pattern.match(tag)
    if not m:
        return False
    text = m.group("version") if "version" in pattern.groupindex else m.group(0)
    try:
        return Version(text)
    except InvalidVersion:
        return None


def list_releases(project: Project, *, now: float | None = None) -> TrackReport:
    series = project.series
    cfg = series.section("track")
    pattern = _pattern(project)
    allow_pre = bool(cfg.get("prereleases", False))
    min_age = float(cfg.get("min-age-days", 0)) * 86400
    now = time.time() if now is None else now
    fork = project.fork()
    tags = fork.source_tags()
    base_v = parse_tag(series.base.tag, pattern)
    report = TrackReport(base=series.base.tag,
                         base_version=str(base_v) if isinstance(base_v, Version) else None)
    if not isinstance(base_v, Version):
        raise SeriesError(f"series.yaml: the base tag '{series.base.tag}' does not match "
                          f"track.pattern or is not a PEP 440 version",
                          tip="set track.pattern so that its 'version' group captures it")
    dates = _tag_dates(project, tags) if min_age else {}
    candidates: list[tuple[Version, TagInfo]] = []
    for tag, commit in tags.items():
        v = parse_tag(tag, pattern)
        if v is False:
            report.ignored.append(tag)
            continue
        if v is None:
            report.unparsable.append(tag)
            continue
        assert isinstance(v, Version)
        if v <= base_v:
            continue
        info = TagInfo(tag=tag, version=str(v), commit=commit, date=dates.get(tag),
                       prerelease=v.is_prerelease or v.is_devrelease)
        if info.prerelease and not allow_pre:
            info.held_back = "pre-release (set track.prereleases: true to act on it)"
        elif min_age and info.date is not None and now - info.date < min_age:
            days = (now - info.date) / 86400
            info.held_back = (f"only {days:.1f} day(s) old; track.min-age-days is "
                              f"{min_age / 86400:g}")
        candidates.append((v, info))
    candidates.sort(key=lambda x: x[0])
    report.newer = [info for _, info in candidates]
    actionable = [info for _, info in candidates if info.held_back is None]
    report.target = actionable[-1] if actionable else None
    report.unparsable.sort()
    report.ignored.sort()
    return report


def _tag_dates(project: Project, tags: dict[str, str]) -> dict[str, float]:
    """Creation date of each tag (tagger date, or the commit date for light tags)."""
    fork = project.fork()
    fork.fetch(["+refs/tags/*:refs/tags/*"])
    out = fork.store.out("for-each-ref", "--format=%(refname:strip=2) %(creatordate:unix)",
                         "refs/tags")
    dates = {}
    for line in out.splitlines():
        name, _, stamp = line.partition(" ")
        if stamp.strip().isdigit():
            dates[name] = float(stamp)
    return dates
