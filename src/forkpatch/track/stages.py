"""The typed results of a run: what it is about (:class:`RunInfo`, keyed by
:class:`RunKey`), one frozen result per stage (:class:`RebaseDone`, :class:`BuildDone`,
...), their JSON, the overall status, and the ``forkpatch-state`` marker a change body
carries.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import ClassVar

from forkpatch.fsutil import read_regular
from forkpatch.kinds import (
    BUILDER_MODES,
    CHECK_OUTCOMES,
    RELATIONS,
    RUN_STATUSES,
    TIER_STATUSES,
    TIERS,
    BuilderMode,
    CheckOutcome,
    JsonObject,
    JsonValue,
    Relation,
    RunStatus,
    StageStatus,
    Tier,
    TierStatus,
)
from forkpatch.project import Project
from forkpatch.track.forecast import BranchForecast, ConflictEntry
from forkpatch.track.releases import TagInfo

RESULT_VERSION = 2
STEPS = ("rebase", "build", "smoke", "publish")
STATE_MARKER = "forkpatch-state:"


@dataclass(frozen=True)
class RunKey:
    """The inputs of a run: a stage done for the same key is not done again."""

    tag: str
    commit: str
    series_sha256: str

    def to_json(self) -> dict[str, str]:
        return {"tag": self.tag, "commit": self.commit, "series_sha256": self.series_sha256}

    @classmethod
    def from_json(cls, raw: object) -> RunKey | None:
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
    newer: tuple[TagInfo, ...]
    forkpatch_version: str

    @property
    def tag(self) -> str:
        return self.key.tag

    def to_json(self) -> dict[str, JsonValue]:
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
            "newer": [t.to_json() for t in self.newer],
            "forkpatch_version": self.forkpatch_version,
        }

    @classmethod
    def from_json(cls, raw: object) -> RunInfo | None:
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
                newer=tuple(TagInfo.from_json(t) for t in raw.get("newer") or ()),
                forkpatch_version=str(raw.get("forkpatch_version", "?")),
            )
        except (KeyError, TypeError, ValueError):
            return None


# ---------------------------------------------------------------- stage results


@dataclass(frozen=True)
class Skipped:
    reason: str
    status: ClassVar[StageStatus] = "skipped"


@dataclass(frozen=True)
class Failed:
    error: str
    tip: str | None = None
    target: str | None = None  # publish: where it was going (no credentials)
    status: ClassVar[StageStatus] = "failed"


@dataclass(frozen=True)
class RebaseDone:
    relation: Relation | None
    note: str | None
    summary: dict[str, int]
    patches: dict[str, str]
    changed_files: tuple[str, ...]
    report_json: str
    report_markdown: str
    series_sha256: str  # of the rebased series in project/
    forecast: BranchForecast | None = None
    #: each patch's upstream request, as ``status --upstream`` sees it: {"state", ...}
    upstream: dict[str, dict[str, str]] | None = None
    status: ClassVar[StageStatus] = "done"


@dataclass(frozen=True)
class RebaseConflict:
    relation: Relation | None
    conflict: ConflictEntry
    blocked: tuple[str, ...]
    patches: dict[str, str]
    forecast: BranchForecast | None = None
    status: ClassVar[StageStatus] = "conflict"


@dataclass(frozen=True)
class BuildDone:
    mode: BuilderMode
    reason: str
    version: str
    wheels: dict[str, str]  # file name -> sha256
    base_wheel: str | None
    provenance: JsonObject  # the wheel's forkpatch-provenance.json
    status: ClassVar[StageStatus] = "done"


@dataclass(frozen=True)
class SmokeRun:
    passed: bool
    tier: Tier
    runner: str
    wheels: dict[str, str]
    report: str
    tiers: Mapping[Tier, TierStatus]
    not_run: Mapping[Tier, str]
    checks: Mapping[str, CheckOutcome]
    failed: tuple[str, ...]
    #: tier -> why, for the tiers asked for that did not run or ran incomplete (and
    #: were not accepted by --allow-missing-tier): the smoke is not done yet.
    missing: dict[str, str] = field(default_factory=dict)
    #: ``forkpatch droppable`` on the rebased series: patch -> {"verdict", "evidence"}
    droppable: dict[str, dict[str, str]] | None = None

    @property
    def status(self) -> StageStatus:
        if not self.passed:
            return "failed"
        return "not-run" if self.missing else "done"


@dataclass(frozen=True)
class PublishDone:
    target: str
    wheels: dict[str, str]
    actions: dict[str, str]
    allowed_missing_tiers: tuple[str, ...]
    status: ClassVar[StageStatus] = "done"


RebaseResult = RebaseDone | RebaseConflict | Failed | Skipped
BuildResult = BuildDone | Failed | Skipped
SmokeResult = SmokeRun | Failed | Skipped
PublishResult = PublishDone | Failed | Skipped
StageResult = RebaseResult | BuildResult | SmokeResult | PublishResult


def _words(keys: tuple[str, ...] | None, values: tuple[str, ...]) -> Callable[[object], object]:
    """A reader of a map whose keys (None: any string) and values are closed sets of
    words (a smoke result's tiers and check outcomes): ValueError for any other."""

    def read(raw: object) -> object:
        if not isinstance(raw, Mapping) or not all(
            isinstance(k, str) and (keys is None or k in keys) and v in values
            for k, v in raw.items()
        ):
            raise ValueError(f"not a map of {', '.join(values)}")
        return dict(raw)

    return read


_NESTED: dict[str, Callable[[Mapping[str, object]], object]] = {
    "forecast": lambda v: None if v is None else BranchForecast.from_json(v),
    "conflict": ConflictEntry.from_json,
    "tiers": _words(TIERS, TIER_STATUSES),
    "checks": _words(None, CHECK_OUTCOMES),
}
#: The fields holding a word of a closed set: a word outside it is not a result of ours.
_WORDS: dict[str, tuple[str | None, ...]] = {
    "mode": BUILDER_MODES,
    "tier": TIERS,
    "relation": (*RELATIONS, None),
}
_BY_STATUS: dict[str, dict[str, type]] = {
    "rebase": {"done": RebaseDone, "conflict": RebaseConflict},
    "build": {"done": BuildDone},
    "smoke": {"done": SmokeRun, "failed": SmokeRun, "not-run": SmokeRun},
    "publish": {"done": PublishDone},
}


def stage_to_json(result: StageResult) -> dict[str, JsonValue]:
    out: dict[str, JsonValue] = {"status": result.status}
    for f in fields(result):
        value = getattr(result, f.name)
        if hasattr(value, "to_json"):
            value = value.to_json()
        elif isinstance(value, tuple):
            value = list(value)
        if value is not None or f.name not in ("tip", "target", "forecast"):
            out[f.name] = value
    return out


def stage_from_json(stage: str, raw: object) -> StageResult | None:
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
    kwargs: dict[str, object] = {}
    try:
        for f in fields(cls):
            if f.name not in raw:
                continue
            value = raw[f.name]
            if f.name in _WORDS and value not in _WORDS[f.name]:
                return None
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

    def to_json(self) -> dict[str, JsonValue]:
        return {s: stage_to_json(r) for s in STEPS if (r := self.get(s)) is not None}


def overall_status(stages: Stages) -> RunStatus:
    """conflict | failed | published | smoked | built | rebased | pending."""
    if isinstance(stages.rebase, RebaseConflict):
        return "conflict"
    present = [r for s in STEPS if (r := stages.get(s)) is not None]
    if any(r.status == "failed" for r in present):
        return "failed"
    furthest: tuple[tuple[StageResult | None, RunStatus], ...] = (
        (stages.publish, "published"),
        (stages.smoke, "smoked"),
        (stages.build, "built"),
        (stages.rebase, "rebased"),
    )
    for result, name in furthest:
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
    def status(self) -> RunStatus:
        return overall_status(self.stages)

    def to_json(self) -> dict[str, JsonValue]:
        return {**self.info.to_json(), "stages": self.stages.to_json(), "status": self.status}


@dataclass(frozen=True)
class PriorState:
    """What an open change's body says about the run that wrote it."""

    key: RunKey
    status: RunStatus
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
    status = raw.get("status")
    if status not in RUN_STATUSES:
        return None  # a marker this forkpatch did not write (or a run's status it lacks)
    return PriorState(key=key, status=status, final=raw.get("final") is True)


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
