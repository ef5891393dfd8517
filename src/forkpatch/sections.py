"""The optional sections of series.yaml (build, smoke, publish, track) as typed, frozen data.

Each section is validated once, when series.yaml loads: every key has a type (and,
where it matters, a set of allowed values, a range, a regular expression that must
compile or a template whose placeholders must be known), list items are checked one
by one, and an error names the file, the line and the key (``series.yaml:14:
build.compiled-patterns[1] must be a string, got integer 2``). A value that is not set
is None: each stage applies its own default.

:meth:`SectionConfig.as_mapping` gives the section back with series.yaml's key names
(for writing series.yaml back); code reads the typed attributes (``series.track.branch``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from forkpatch import checkids
from forkpatch.errors import SeriesError
from forkpatch.kinds import (
    BUILD_MODES,
    CACHE_KINDS,
    TEAM_CHECK_SOURCES,
    BuildMode,
    CacheKind,
    TeamCheckSource,
)

KNOWN_TIERS = checkids.TIERS
BOT_BRANCH_FIELDS = ("tag", "version")

_TIP = "fix series.yaml and run again"


@dataclass(frozen=True)
class Value:
    """A value read from series.yaml, with where it was (and where each list item was)."""

    value: Any
    at: str  # "series.yaml:12"
    name: str  # "build.max-jobs"
    items: tuple[str, ...] = ()  # for a list: the place of each item ("series.yaml:13")
    keys: Mapping[str, Value] | None = None  # for a mapping: its values

    @property
    def where(self) -> str:
        return f"{self.at}: {self.name}"

    def item(self, i: int, value: Any) -> Value:
        return Value(value, self.items[i] if i < len(self.items) else self.at, f"{self.name}[{i}]")


def _kind(value: object) -> str:
    if value is None:
        return "nothing (an empty value)"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"number {value}"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return f"{type(value).__name__} {value!r}"


def _err(where: str, message: str, tip: str = _TIP) -> SeriesError:
    return SeriesError(f"{where} {message}", tip=tip)


def _string(v: Value) -> str:
    if not isinstance(v.value, str):
        tip = f'quote it: "{v.value}"' if isinstance(v.value, (int, float)) else _TIP
        raise _err(v.where, f"must be a string, got {_kind(v.value)}", tip)
    if not v.value.strip():
        raise _err(v.where, "must not be empty")
    return v.value


def _choice(choices: Sequence[str]) -> Callable[[Value], str]:
    def check(v: Value) -> str:
        text = _string(v)
        if text not in choices:
            raise _err(
                v.where,
                f"must be one of {', '.join(choices)}, got {text!r}",
                f"allowed: {', '.join(choices)}",
            )
        return text

    return check


def _strings(choices: Sequence[str] | None = None) -> Callable[[Value], tuple[str, ...]]:
    def check(v: Value) -> tuple[str, ...]:
        if not isinstance(v.value, (list, tuple)):
            raise _err(v.where, f"must be a list, got {_kind(v.value)}", "write it as [a, b]")
        out = []
        for i, item in enumerate(v.value):
            one = v.item(i, item)
            out.append(_choice(choices)(one) if choices else _string(one))
        return tuple(out)

    return check


def _positive_int(v: Value) -> int:
    if not isinstance(v.value, int) or isinstance(v.value, bool):
        raise _err(v.where, f"must be a whole number, got {_kind(v.value)}")
    if v.value < 1:
        raise _err(v.where, f"must be at least 1, got {v.value}")
    return v.value


def _days(v: Value) -> float:
    if not isinstance(v.value, (int, float)) or isinstance(v.value, bool):
        raise _err(v.where, f"must be a number of days, got {_kind(v.value)}")
    if v.value < 0 or v.value != v.value or v.value == float("inf"):
        raise _err(v.where, f"must be zero or more days, got {v.value}")
    return float(v.value)


def _flag(v: Value) -> bool:
    if not isinstance(v.value, bool):
        raise _err(v.where, f"must be true or false, got {_kind(v.value)}")
    return v.value


def _regex(v: Value) -> str:
    text = _string(v)
    try:
        re.compile(text)
    except re.error as exc:
        raise _err(v.where, f"is not a valid regular expression: {exc}") from None
    return text


def _bot_branch(v: Value) -> str:
    text = _string(v)
    try:
        text.format(**dict.fromkeys(BOT_BRANCH_FIELDS, "x"))
    except (KeyError, IndexError, ValueError) as exc:
        raise _err(
            v.where,
            f"is not a branch template: {exc!s}",
            "use only the placeholders {tag} and {version}",
        ) from None
    return text


@dataclass(frozen=True)
class _Key:
    name: str  # as in series.yaml
    attr: str
    check: Callable[[Value], Any]


class SectionConfig:
    """Behaviour shared by the section classes (each a frozen dataclass)."""

    SECTION: ClassVar[str]
    KEYS: ClassVar[tuple[_Key, ...]]

    @classmethod
    def from_values(cls, values: Mapping[str, Value]) -> Any:
        """Build the section from values read at known places (unknown keys refused)."""
        import difflib

        by_name = {k.name: k for k in cls.KEYS}
        out: dict[str, Any] = {}
        for name, v in values.items():
            key = by_name.get(name)
            if key is None:
                close = difflib.get_close_matches(name, list(by_name), n=1, cutoff=0.6)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise _err(
                    f"{v.at}:",
                    f"{cls.SECTION}: unknown key '{name}'{hint}",
                    f"allowed keys: {', '.join(by_name)}",
                )
            out[key.attr] = key.check(v)
        return cls(**out)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, at: str) -> Any:
        """From plain data (a test or a caller building a Series): the same checks;
        ``at`` names the source in errors."""
        if not isinstance(data, Mapping):
            raise _err(f"{at}: {cls.SECTION}", f"must be a mapping, got {_kind(data)}")
        return cls.from_values(
            {str(k): _plain(v, at, f"{cls.SECTION}.{k}") for k, v in data.items()}
        )

    def as_mapping(self) -> dict[str, Any]:
        """The keys that are set, with series.yaml's names and plain values."""
        out: dict[str, Any] = {}
        for key in self.KEYS:
            value = getattr(self, key.attr)
            if value is None:
                continue
            if isinstance(value, SectionConfig):
                value = value.as_mapping()
            elif isinstance(value, tuple):
                value = list(value)
            out[key.name] = value
        return out

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))  # type: ignore[arg-type]


def _plain(value: Any, at: str, name: str) -> Value:
    if isinstance(value, Mapping):
        keys = {str(k): _plain(v, at, f"{name}.{k}") for k, v in value.items()}
        return Value(value, at, name, keys=keys)
    if isinstance(value, (list, tuple)):
        return Value(list(value), at, name)
    return Value(value, at, name)


@dataclass(frozen=True)
class CacheSettings(SectionConfig):
    """``build.cache``: where compiler output is cached (forkpatch.wheels.container)."""

    kind: CacheKind | None = None
    volume: str | None = None
    ccache_dir: str | None = None
    max_size: str | None = None

    SECTION: ClassVar[str] = "build.cache"
    KEYS: ClassVar[tuple[_Key, ...]] = (
        _Key("kind", "kind", _choice(CACHE_KINDS)),
        _Key("volume", "volume", _string),
        _Key("ccache-dir", "ccache_dir", _string),
        _Key("max-size", "max_size", _string),
    )


def _cache(v: Value) -> CacheSettings:
    if not isinstance(v.value, Mapping) or v.keys is None:
        raise _err(v.where, f"must be a mapping, got {_kind(v.value)}")
    return CacheSettings.from_values(v.keys)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class BuildConfig(SectionConfig):
    """``build:``: how wheels are built (forkpatch.wheels.buildwheel)."""

    mode: BuildMode | None = None
    arch_list: str | None = None
    base_wheel: str | None = None
    dist_dir: str | None = None
    compiled_patterns: tuple[str, ...] | None = None
    base_image: str | None = None
    cache: CacheSettings | None = None
    max_jobs: int | None = None

    SECTION: ClassVar[str] = "build"
    KEYS: ClassVar[tuple[_Key, ...]] = (
        _Key("mode", "mode", _choice(BUILD_MODES)),
        _Key("arch-list", "arch_list", _string),
        _Key("base-wheel", "base_wheel", _string),
        _Key("dist-dir", "dist_dir", _string),
        _Key("compiled-patterns", "compiled_patterns", _strings()),
        _Key("base-image", "base_image", _string),
        _Key("cache", "cache", _cache),
        _Key("max-jobs", "max_jobs", _positive_int),
    )


_TEAM_CHECK_ID = re.compile(r"^([a-z0-9-]+)\.([a-z0-9][a-z0-9._-]{0,79})$")


def _seconds(v: Value) -> int:
    return _positive_int(v)


@dataclass(frozen=True)
class TeamCheck(SectionConfig):
    """One of ``smoke.checks``: a check of the team's own, run in the smoke environment
    with the wheel installed: a pytest node id (in the project, or in the fork's tree at
    the series' base) or a command (a list: program and arguments)."""

    pytest: str | None = None
    command: tuple[str, ...] | None = None
    source: TeamCheckSource | None = None  # "in": project (default) or fork, for pytest
    summary: str | None = None
    timeout: int | None = None  # seconds (default 600)

    SECTION: ClassVar[str] = "smoke.checks"
    KEYS: ClassVar[tuple[_Key, ...]] = (
        _Key("pytest", "pytest", _string),
        _Key("command", "command", _strings()),
        _Key("in", "source", _choice(TEAM_CHECK_SOURCES)),
        _Key("summary", "summary", _string),
        _Key("timeout", "timeout", _seconds),
    )


def _node_id_problem(nodeid: str) -> str | None:
    """Why a team check's pytest node id may not be run (None: it may): it must name a
    file inside the tree it runs in, and must not be read by pytest as an option."""
    path = nodeid.split("::", 1)[0]
    if nodeid.startswith("-"):
        return "starts with '-' (pytest would read it as an option)"
    if path.startswith(("/", "~", "\\")) or re.match(r"^[A-Za-z]:", path):
        return "is an absolute path"
    if ".." in re.split(r"[/\\]", path):
        return "leads out of its tree with '..'"
    return None


def _team_checks(v: Value) -> tuple[tuple[str, TeamCheck], ...]:
    if not isinstance(v.value, Mapping) or v.keys is None or not v.keys:
        raise _err(
            v.where,
            f"must be a mapping of check ids to checks, got {_kind(v.value)}",
            "e.g. checks: {static.our-import: {pytest: tests/test_ours.py::test_import}}",
        )
    out = []
    for cid, cv in v.keys.items():
        m = _TEAM_CHECK_ID.match(cid)
        if m is None or m.group(1) not in KNOWN_TIERS:
            raise _err(
                cv.where,
                f"check id {cid!r} must be '<tier>.<name>' with a tier of "
                f"{', '.join(KNOWN_TIERS)} (the tier it needs)",
            )
        if not isinstance(cv.value, Mapping) or cv.keys is None:
            raise _err(cv.where, f"must be a mapping, got {_kind(cv.value)}")
        tc: TeamCheck = TeamCheck.from_values(cv.keys)
        if (tc.pytest is None) == (tc.command is None):
            raise _err(cv.where, "needs exactly one of 'pytest' (a node id) or 'command' (a list)")
        if tc.command is not None and not tc.command:
            raise _err(cv.where, "command must not be empty")
        if tc.source is not None and tc.pytest is None:
            raise _err(cv.where, "'in' names where a pytest node id is; a command has none")
        if tc.pytest is not None and (why := _node_id_problem(tc.pytest)) is not None:
            raise _err(
                cv.where,
                f"pytest node id {tc.pytest!r} {why}",
                "name a test file by its path inside the project (or, with in: fork, inside "
                "the fork's tree): tests/test_ours.py::test_import",
            )
        out.append((cid, tc))
    return tuple(out)


@dataclass(frozen=True)
class SmokeConfig(SectionConfig):
    """``smoke:``: what the smoke suite needs (forkpatch.smoke)."""

    required_tiers: tuple[str, ...] | None = None
    index_url: str | None = None
    python: str | None = None
    #: the team's own checks, (id, check) in series.yaml order
    checks: tuple[tuple[str, TeamCheck], ...] | None = None

    SECTION: ClassVar[str] = "smoke"
    KEYS: ClassVar[tuple[_Key, ...]] = (
        _Key("required-tiers", "required_tiers", _strings(KNOWN_TIERS)),
        _Key("index-url", "index_url", _string),
        _Key("python", "python", _string),
        _Key("checks", "checks", _team_checks),
    )

    def as_mapping(self) -> dict[str, Any]:
        out = super().as_mapping()
        if self.checks is not None:
            out["checks"] = {cid: tc.as_mapping() for cid, tc in self.checks}
        return out

    def team_checks(self) -> dict[str, TeamCheck]:
        return dict(self.checks or ())


@dataclass(frozen=True)
class PublishConfig(SectionConfig):
    """``publish:``: where wheels go and what must have passed (forkpatch.publish)."""

    to: str | None = None
    required_tiers: tuple[str, ...] | None = None

    SECTION: ClassVar[str] = "publish"
    KEYS: ClassVar[tuple[_Key, ...]] = (
        _Key("to", "to", _string),
        _Key("required-tiers", "required_tiers", _strings(KNOWN_TIERS)),
    )


@dataclass(frozen=True)
class TrackConfig(SectionConfig):
    """``track:``: which fork releases to follow (forkpatch.track)."""

    pattern: str | None = None
    prereleases: bool | None = None
    min_age_days: float | None = None
    branch: str | None = None
    bot_branch: str | None = None

    SECTION: ClassVar[str] = "track"
    KEYS: ClassVar[tuple[_Key, ...]] = (
        _Key("pattern", "pattern", _regex),
        _Key("prereleases", "prereleases", _flag),
        _Key("min-age-days", "min_age_days", _days),
        _Key("branch", "branch", _string),
        _Key("bot-branch", "bot_branch", _bot_branch),
    )


SECTIONS: dict[str, type[SectionConfig]] = {
    "build": BuildConfig,
    "smoke": SmokeConfig,
    "publish": PublishConfig,
    "track": TrackConfig,
}
