"""The smoke report: JSON (what publish reads) and JUnit XML (for CI systems).

A tier's status is one of:

- ``passed``: it ran and every one of its checks passed;
- ``failed``: a check failed or errored;
- ``incomplete``: it ran but some of its checks could not (e.g. torch absent
  in a ``--deps none`` environment); never counted as passed;
- ``not-run``: its hardware is absent or it was not requested; the reason is
  recorded. Never counted as passed.
"""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, TypeVar

from forkpatch import __version__
from forkpatch.errors import BuildError, SmokeError
from forkpatch.escape import xml_text
from forkpatch.fsutil import atomic_write, read_regular
from forkpatch.kinds import (
    CHECK_OUTCOMES,
    TIER_STATUSES,
    TIERS,
    CheckOutcome,
    JsonObject,
    JsonValue,
    PatchCheckStatus,
    Tier,
    TierStatus,
    word_of,
)
from forkpatch.redact import scrub
from forkpatch.typedreader import TypedReader

if TYPE_CHECKING:
    from forkpatch.wheels.identity import Provenance

SCHEMA = 1
PASSED: Final = "passed"
FAILED: Final = "failed"
ERROR: Final = "error"
NOT_RUN: Final = "not-run"
INCOMPLETE: Final = "incomplete"
DECLARED_CHECK_FAILED: Final = "declared-check-failed"
_FRESH_REPORT = "run `forkpatch smoke WHEEL` again to write a fresh report (never edit one by hand)"
#: A note of the report: a line of what a check said, kept as long as it was.
_NOTE_LIMIT = 1 << 20
T = TypeVar("T")
REPORT_SUFFIX = ".smoke.json"
STORE = Path(".forkpatch") / "smoke"


def _is_json(value: object) -> bool:
    # Iterative: a file's nesting decides the depth, never Python's recursion limit.
    todo = [value]
    while todo:
        v = todo.pop()
        if v is None or isinstance(v, (str, int, float)):
            continue
        if isinstance(v, (list, tuple)):
            todo.extend(v)
        elif isinstance(v, dict) and all(isinstance(k, str) for k in v):
            todo.extend(v.values())
        else:
            return False
    return True


def json_object(value: object) -> JsonObject | None:
    """``value`` when it is a JSON object (string keys, JSON values all the way down)."""
    if isinstance(value, dict) and _is_json(value):
        return value
    return None


def as_tier(word: str) -> Tier:
    """``word`` as a :data:`~forkpatch.kinds.Tier` (ValueError when it is none)."""
    tier = word_of(word, TIERS)
    if tier is not None:
        return tier
    raise ValueError(f"{word!r} is not a smoke tier ({', '.join(TIERS)})")


def as_outcome(word: str) -> CheckOutcome:
    """``word`` as a :data:`~forkpatch.kinds.CheckOutcome` (ValueError when it is none)."""
    outcome = word_of(word, CHECK_OUTCOMES)
    if outcome is not None:
        return outcome
    raise ValueError(f"{word!r} is not a check outcome ({' / '.join(CHECK_OUTCOMES)})")


@dataclass(frozen=True)
class CheckResult:
    id: str
    tier: Tier
    outcome: CheckOutcome
    duration_s: float = 0.0
    detail: str = ""
    patches: Sequence[str] = ()  # the patches that declare it; () for baseline checks

    def __post_init__(self) -> None:
        object.__setattr__(self, "patches", tuple(self.patches))
        # A word outside its Literal is a bug of the caller: refused here, not written.
        as_tier(self.tier)
        as_outcome(self.outcome)

    @classmethod
    def of(
        cls,
        cid: str,
        tier: str,
        outcome: str,
        duration_s: float = 0.0,
        detail: str = "",
        patches: Sequence[str] = (),
    ) -> CheckResult:
        """A result from the plain words the check suite and the registry use (the suite
        runs without forkpatch): each word checked against its Literal."""
        return cls(cid, as_tier(tier), as_outcome(outcome), duration_s, detail, patches)

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "id": self.id,
            "tier": self.tier,
            "outcome": self.outcome,
            "duration_s": self.duration_s,
            "detail": self.detail,
            "patches": list(self.patches),
        }


@dataclass(frozen=True)
class TierResult:
    """A tier's status, derived from its checks (:func:`derive_tiers`)."""

    status: TierStatus
    reason: str
    counts: Mapping[CheckOutcome, int]  # how many of its checks had each outcome
    of: int = 0  # how many built-in checks forkpatch has in the tier

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "counts", MappingProxyType({o: self.counts.get(o, 0) for o in CHECK_OUTCOMES})
        )

    @property
    def ran(self) -> int:
        """How many of its checks ran (passed, failed or errored)."""
        return sum(n for o, n in self.counts.items() if o != NOT_RUN)

    @property
    def has_run(self) -> bool:
        return self.status != NOT_RUN

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "status": self.status,
            "reason": self.reason,
            "checks": {o: n for o, n in self.counts.items()},
            "ran": self.ran,
            "of": self.of,
        }


@dataclass(frozen=True)
class PatchChecks:
    """A patch of the wheel with the checks it declares and how they went."""

    name: str
    status: PatchCheckStatus
    checks: Mapping[str, CheckOutcome]

    def to_json(self) -> dict[str, JsonValue]:
        return {"name": self.name, "status": self.status, "checks": dict(self.checks)}


@dataclass(frozen=True)
class WheelEntry:
    """One wheel a report is for (the fork's wheel and its companions)."""

    sha256: str
    file: str | None = None
    name: str | None = None
    version: str | None = None
    size: int | None = None

    def to_json(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {}
        if self.file is not None:
            out["file"] = self.file
        out["sha256"] = self.sha256
        for key, value in (("name", self.name), ("version", self.version), ("size", self.size)):
            if value is not None:
                out[key] = value
        return out


@dataclass(frozen=True)
class PublishRecord:
    """Where and why a wheel was published: the ``publish`` field of a published report."""

    target: str
    file: str
    sha256: str
    at: str
    by: str
    #: From the check results, never from the report's own summary.
    required_tiers_passed: Sequence[Tier]
    #: tier -> "not run: <why>", for each tier published without (--allow-missing-tier)
    allowed_missing_tiers: Mapping[str, str]

    def __post_init__(self) -> None:
        object.__setattr__(self, "required_tiers_passed", tuple(self.required_tiers_passed))
        object.__setattr__(
            self, "allowed_missing_tiers", MappingProxyType(dict(self.allowed_missing_tiers))
        )

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "target": self.target,
            "file": self.file,
            "sha256": self.sha256,
            "at": self.at,
            "by": self.by,
            "required_tiers_passed": list(self.required_tiers_passed),
            "allowed_missing_tiers": dict(self.allowed_missing_tiers),
        }


@dataclass(frozen=True)
class SmokeReport:
    """What a smoke run found: written by :meth:`to_json`, read back (validated) by
    :meth:`from_json`. Every summary (tier status, passed) is derived from the checks."""

    wheels: Sequence[WheelEntry]
    primary_sha256: str
    version: str
    requested_tiers: Sequence[Tier]
    checks: Sequence[CheckResult]
    environment: JsonObject
    device: JsonObject
    patches: Sequence[str]  # from the wheel's provenance, in order
    provenance: Provenance | None = None
    series_compared: bool = False
    started: str = ""
    duration_s: float = 0.0
    notes: Sequence[str] = ()
    forkpatch_version: str = __version__  # of the forkpatch that ran the smoke
    publish: PublishRecord | None = None  # set in the copy publish puts beside the wheel

    def __post_init__(self) -> None:
        for name in ("wheels", "requested_tiers", "checks", "patches", "notes"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    # ------------------------------------------------------------- derived

    @cached_property
    def tiers(self) -> Mapping[Tier, TierResult]:
        """Every tier's result, in tier order, from the check results."""
        return MappingProxyType(derive_tiers(self.checks, self.requested_tiers))

    @property
    def passed(self) -> bool:
        """No check failed or errored (tiers not run do not make a report fail)."""
        return derived_passed(self.checks)

    @property
    def sha256s(self) -> frozenset[str]:
        """The sha256 of every wheel the report is for."""
        return frozenset(w.sha256 for w in self.wheels)

    @property
    def deps(self) -> str | None:
        """How the smoke environment got the wheel's dependencies (system / none / ...)."""
        deps = self.environment.get("deps")
        return deps if isinstance(deps, str) else None

    def status(self, tier: Tier) -> TierStatus:
        """``tier``'s status (passed / failed / incomplete / not-run), from the checks."""
        return self.tiers[tier].status

    def reason(self, tier: Tier) -> str:
        return self.tiers[tier].reason

    def statuses(self) -> dict[Tier, TierStatus]:
        """Every tier's status, in tier order (the report's ``tiers.status``)."""
        return {t: r.status for t, r in self.tiers.items()}

    def not_run(self) -> dict[Tier, str]:
        """The tiers that did not run, each with why (the report's ``tiers.not_run``)."""
        return {t: r.reason for t, r in self.tiers.items() if r.status == NOT_RUN}

    def ran(self) -> list[Tier]:
        """The tiers that ran (passed, failed or incomplete), in tier order."""
        return ran_tiers(self.tiers)

    def failed(self) -> list[CheckResult]:
        """The checks that failed or errored, in report order."""
        return [c for c in self.checks if c.outcome in (FAILED, ERROR)]

    def outcomes(self) -> dict[str, CheckOutcome]:
        """Each check's outcome by id."""
        return {c.id: c.outcome for c in self.checks}

    def per_patch(self) -> list[PatchChecks]:
        """Each patch with the checks it declares (``smoke:``) and how they went. A patch
        whose declared check failed is ``declared-check-failed``, not "failed": a check
        is broken by whichever patch broke it, and only ``--bisect`` says which."""
        out = []
        for name in self.patches:
            mine = [c for c in self.checks if name in c.patches]
            outcomes = {c.outcome for c in mine}
            status: PatchCheckStatus
            if not mine:
                status = "no-checks"
            elif outcomes & {FAILED, ERROR}:
                status = DECLARED_CHECK_FAILED
            elif outcomes == {PASSED}:
                status = PASSED
            elif PASSED in outcomes:
                status = "partial"
            else:
                status = NOT_RUN
            out.append(PatchChecks(name, status, {c.id: c.outcome for c in mine}))
        return out

    def cuda_devices(self) -> list[tuple[int, str, tuple[int, ...]]]:
        """(index, name, capability) of each CUDA device the check process saw."""
        found = self.device.get("devices")
        out = []
        for d in found if isinstance(found, (list, tuple)) else ():
            if not isinstance(d, Mapping):
                continue
            index, name, cap = d.get("index"), d.get("name"), d.get("capability")
            caps = tuple(c for c in cap if isinstance(c, int)) if isinstance(cap, list) else ()
            out.append((index if isinstance(index, int) else -1, str(name), caps))
        return out

    def to_json(self) -> dict[str, JsonValue]:
        tiers = self.tiers
        out: dict[str, JsonValue] = {
            "schema": SCHEMA,
            "kind": "forkpatch-smoke-report",
            "forkpatch_version": self.forkpatch_version,
            "started": self.started,
            "duration_s": round(self.duration_s, 3),
            "passed": self.passed,
            "wheel": {"sha256": self.primary_sha256, "version": self.version},
            "wheels": [w.to_json() for w in self.wheels],
            "tiers": {
                "requested": list(self.requested_tiers),
                "run": self.ran(),
                "not_run": {t: r.reason for t, r in tiers.items() if r.status == NOT_RUN},
                "status": {t: r.status for t, r in tiers.items()},
                "detail": {t: r.to_json() for t, r in tiers.items()},
            },
            "device": self.device,
            "environment": self.environment,
            "patches": [p.to_json() for p in self.per_patch()],
            "provenance": None if self.provenance is None else _provenance_json(self.provenance),
            "series_compared": self.series_compared,
            "checks": [c.to_json() for c in self.checks],
            "notes": list(self.notes),
        }
        if self.publish is not None:
            out["publish"] = self.publish.to_json()
        return out

    @classmethod
    def from_json(cls, data: object, *, source: Path) -> SmokeReport:
        """A report read back: checked against the schema strictly (types, known values,
        required fields), then its summary (``passed``, ``tiers.status``) against what
        its own check results give. Anything else is a SmokeError naming ``source`` and
        the field: a report is evidence for publishing, so nothing in it is taken on
        trust."""
        return _validate(data, source)


def _provenance_json(prov: Provenance) -> JsonValue:
    # The keys in the order the wheel's file has them (sorted), as older reports did.
    value: JsonValue = json.loads(prov.to_json())
    return value


def derive_tiers(
    checks: Sequence[CheckResult], requested: Sequence[Tier]
) -> dict[Tier, TierResult]:
    """Each tier's result, from the individual check results: the only source of truth
    (a report's own summary is checked against this, never trusted)."""
    out: dict[Tier, TierResult] = {}
    for tier in TIERS:
        results = [c for c in checks if c.tier == tier]
        outcomes = {c.outcome for c in results}
        status: TierStatus
        if tier not in requested:
            status, reason = (
                NOT_RUN,
                "not requested (--tier " + (requested[-1] if requested else "?") + ")",
            )
        elif outcomes & {FAILED, ERROR}:
            status, reason = FAILED, ""
        elif not results:
            status, reason = NOT_RUN, "no checks"
        elif outcomes == {NOT_RUN}:
            status, reason = NOT_RUN, _common_reason(results)
        elif NOT_RUN in outcomes:
            status = INCOMPLETE
            reason = "; ".join(f"{c.id}: {c.detail}" for c in results if c.outcome == NOT_RUN)
        else:
            status, reason = PASSED, ""
        counts = {o: sum(1 for c in results if c.outcome == o) for o in CHECK_OUTCOMES}
        out[tier] = TierResult(status, reason, counts, builtin_count(tier))
    return out


def builtin_count(tier: str) -> int:
    """How many checks forkpatch itself has in ``tier``."""
    from forkpatch.checkids import CHECK_IDS, HOST_CHECK_IDS

    return sum(1 for cid in (*CHECK_IDS, *HOST_CHECK_IDS) if cid.partition(".")[0] == tier)


def ran_tiers(tiers: Mapping[Tier, TierResult]) -> list[Tier]:
    """Of :func:`derive_tiers`'s result, the tiers that ran, in tier order."""
    return [t for t in TIERS if tiers[t].has_run]


def derived_passed(checks: Sequence[CheckResult]) -> bool:
    return not any(c.outcome in (FAILED, ERROR) for c in checks)


def _common_reason(results: Sequence[CheckResult]) -> str:
    reasons = []
    for c in results:
        if c.detail and c.detail not in reasons:
            reasons.append(c.detail)
    return "; ".join(reasons)


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# --------------------------------------------------------------------------- files


def dumps(report: SmokeReport) -> bytes:
    """A report's bytes; credentials in URLs (e.g. an old wheel's fork URL) and the
    values of the environment's credentials (a failing check that echoed them) hidden."""
    return (json.dumps(scrub(report.to_json()), indent=2, sort_keys=False) + "\n").encode("utf-8")


def write_report(report: SmokeReport, path: Path) -> Path:
    atomic_write(path, dumps(report))
    return path


def read_report(path: Path) -> SmokeReport:
    """Read and validate a smoke report file; SmokeError naming the file and field."""
    try:
        raw = read_regular(path)
    except FileNotFoundError:
        raise SmokeError(f"{path}: no such smoke report") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise SmokeError(
            f"{path}: not a JSON smoke report ({type(exc).__name__}: {exc})"
            if isinstance(exc, RecursionError)
            else f"{path}: not a JSON smoke report ({exc})",
            tip="run `forkpatch smoke WHEEL` again to write a fresh one",
        ) from None
    return SmokeReport.from_json(data, source=Path(path))


def _number(r: TypedReader, data: Mapping[str, object], key: str, where: str) -> float:
    """A number (whole or not; not a bool), 0.0 where the key is absent."""
    value = data.get(key, 0.0)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise r.fail(where, f"'{key}' must be a number, found {value!r}")
    return float(value)


def _optional(
    r: TypedReader, data: Mapping[str, object], key: str, kind: type[T], where: str
) -> T | None:
    """``data[key]`` as ``kind``, or None where it is absent or null."""
    return None if data.get(key) is None else r.field(data, key, kind, where)


def _wheels(r: TypedReader, raw: object) -> tuple[WheelEntry, ...]:
    items = r.items({"wheels": raw}, "wheels", "")
    if not items:
        raise r.fail("wheels", "must not be empty")
    out = []
    for i, item in enumerate(items):
        where = f"wheels[{i}]"
        w = r.mapping(item, where)
        out.append(
            WheelEntry(
                r.sha256(w, "sha256", where),
                file=_optional(r, w, "file", str, where),
                name=_optional(r, w, "name", str, where),
                version=_optional(r, w, "version", str, where),
                size=r.maybe_number(w, "size", where),
            )
        )
    return tuple(out)


def _checks(r: TypedReader, raw: object) -> list[CheckResult]:
    checks: list[CheckResult] = []
    seen: set[str] = set()
    for i, item in enumerate(r.items({"checks": raw}, "checks", "")):
        where = f"checks[{i}]"
        c = r.mapping(item, where, required=("id", "tier", "outcome"))
        tier = r.word(c, "tier", TIERS, where)
        cid = r.text(c, "id", where)
        if not (cid.startswith(f"{tier}.") and len(cid) > len(tier) + 1):
            raise r.fail(where, f"'id' must be '{tier}.<name>', found {cid!r}")
        if cid in seen:
            raise r.fail(where, f"'id' {cid!r} is not unique")
        seen.add(cid)
        checks.append(
            CheckResult(
                cid,
                tier,
                r.word(c, "outcome", CHECK_OUTCOMES, where),
                _number(r, c, "duration_s", where),
                _optional(r, c, "detail", str, where) or "",
                list(r.strings(c, "patches", where, optional=True)),
            )
        )
    return checks


def _patch_names(r: TypedReader, raw: object) -> list[str]:
    return [
        r.text(r.mapping(p, f"patches[{i}]"), "name", f"patches[{i}]")
        for i, p in enumerate(r.items({"patches": raw}, "patches", ""))
    ]


def _provenance(r: TypedReader, raw: object) -> Provenance | None:
    if raw is None:
        return None
    from forkpatch.wheels.identity import Provenance

    try:
        return Provenance.from_json(json.dumps(raw), source="provenance")
    except BuildError as exc:
        raise r.error(f"{r.source}: {exc.message}", tip=r.tip) from None


def _publish(r: TypedReader, raw: object) -> PublishRecord | None:
    if raw is None:
        return None
    d = r.mapping(raw, "publish")
    passed = r.items(d, "required_tiers_passed", "publish", optional=True)
    allowed = r.text_map(d, "allowed_missing_tiers", "publish")
    return PublishRecord(
        target=r.field(d, "target", str, "publish"),
        file=r.field(d, "file", str, "publish"),
        sha256=r.field(d, "sha256", str, "publish"),
        at=r.field(d, "at", str, "publish"),
        by=r.field(d, "by", str, "publish"),
        required_tiers_passed=[
            r.word({"tier": t}, "tier", TIERS, f"publish.required_tiers_passed[{i}]")
            for i, t in enumerate(passed)
        ],
        allowed_missing_tiers=allowed,
    )


def _tiers(r: TypedReader, raw: object) -> tuple[list[Tier], dict[Tier, TierStatus]]:
    """The requested tiers and the status the report claims for each."""
    tiers = r.mapping(raw, "tiers")
    requested = [
        r.word({"tier": t}, "tier", TIERS, f"tiers.requested[{i}]")
        for i, t in enumerate(r.items(tiers, "requested", "tiers"))
    ]
    claimed = r.mapping(tiers.get("status"), "tiers.status")
    status = {
        r.word({"tier": t}, "tier", TIERS, "tiers.status"): r.word(
            claimed, t, TIER_STATUSES, "tiers.status"
        )
        for t in claimed
    }
    for key in ("not_run", "detail"):
        if key in tiers:
            r.mapping(tiers[key], f"tiers.{key}")
    r.text_map(tiers, "not_run", "tiers")
    return requested, status


#: The optional fields of a report's top level, and what each must be.
_TOP_FIELDS: Mapping[str, Callable[[object], bool]] = {
    "started": lambda v: isinstance(v, str),
    "duration_s": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "forkpatch_version": lambda v: isinstance(v, str),
    "series_compared": lambda v: isinstance(v, bool),
    "device": lambda v: json_object(v) is not None,
    "environment": lambda v: json_object(v) is not None,
    "provenance": lambda v: v is None or isinstance(v, dict),
    "patches": lambda v: isinstance(v, list),
    "notes": lambda v: isinstance(v, list) and all(isinstance(n, str) for n in v),
}


def _validate(data: object, path: Path) -> SmokeReport:
    r = TypedReader(str(path), error=SmokeError, tip=_FRESH_REPORT)
    top = r.mapping(data, "")
    if top.get("kind") != "forkpatch-smoke-report":
        raise r.fail("kind", "not a forkpatch smoke report")
    schema = top.get("schema")
    if schema != SCHEMA or isinstance(schema, bool):
        raise SmokeError(
            f"{path}: smoke report schema {schema!r} is not {SCHEMA}",
            tip="run `forkpatch smoke` with this forkpatch version",
        )
    r.mapping(top, "", required=("passed", "wheel", "wheels", "tiers", "checks"))
    passed = r.field(top, "passed", bool, "")
    wheel = r.mapping(top["wheel"], "wheel")
    primary = r.sha256(wheel, "sha256", "wheel")
    version = _optional(r, wheel, "version", str, "wheel") or ""
    wheels = _wheels(r, top["wheels"])
    if primary not in {w.sha256 for w in wheels}:
        raise r.fail("wheel", "'sha256' is none of wheels[].sha256")
    requested, status = _tiers(r, top["tiers"])
    checks = _checks(r, top["checks"])
    for key, ok in _TOP_FIELDS.items():
        if key in top and not ok(top[key]):
            raise r.fail(key, f"has the wrong type ({type(top[key]).__name__})")
    derived = derive_tiers(checks, requested)
    for t, st in status.items():
        if st != derived[t].status:
            raise r.fail(
                f"tiers.status.{t}", f"says {st!r}, but its check results say {derived[t].status!r}"
            )
    if passed != derived_passed(checks):
        raise r.fail("passed", f"says {passed}, but its check results say {derived_passed(checks)}")
    return SmokeReport(
        wheels=wheels,
        primary_sha256=primary,
        version=version,
        requested_tiers=requested,
        checks=checks,
        environment=json_object(top.get("environment", {})) or {},
        device=json_object(top.get("device", {})) or {},
        patches=_patch_names(r, top.get("patches", [])),
        provenance=_provenance(r, top.get("provenance")),
        series_compared=top.get("series_compared") is True,
        started=str(top.get("started", "")),
        duration_s=_number(r, top, "duration_s", ""),
        notes=list(r.strings(top, "notes", "", optional=True, limit=_NOTE_LIMIT)),
        forkpatch_version=str(top.get("forkpatch_version", "")),
        publish=_publish(r, top.get("publish")),
    )


def store_path(project_root: Path, sha256: str) -> Path:
    return project_root / STORE / f"{sha256}.json"


def beside_wheel(wheel: Path) -> Path:
    return wheel.with_name(wheel.name + REPORT_SUFFIX)


# --------------------------------------------------------------------------- JUnit


def junit_xml(report: SmokeReport) -> bytes:
    """JUnit XML: one <testsuite> per tier, one <testcase> per check.

    not-run checks are <skipped> with the reason (CI shows them as skipped,
    never green-passed); failed ones <failure>, errors <error>.
    """

    def clean(text: object) -> str:
        # What a check printed may hold the environment's credentials.
        return str(scrub(str(text)))

    suites = ET.Element("testsuites", name="forkpatch smoke")
    total = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    statuses = report.statuses()
    for tier in TIERS:
        checks = [c for c in report.checks if c.tier == tier]
        counts = {
            "tests": len(checks),
            "failures": sum(c.outcome == FAILED for c in checks),
            "errors": sum(c.outcome == ERROR for c in checks),
            "skipped": sum(c.outcome == NOT_RUN for c in checks),
        }
        for k in total:
            total[k] += counts[k]
        attrs = {
            "name": f"smoke.{tier}",
            "time": f"{sum(c.duration_s for c in checks):.3f}",
            "timestamp": clean(report.started),
            **{k: str(v) for k, v in counts.items()},
        }
        suite = ET.SubElement(suites, "testsuite", attrs)
        props = ET.SubElement(suite, "properties")
        for key, value in (
            ("wheel.sha256", report.primary_sha256),
            ("wheel.version", report.version),
            ("tier.status", statuses[tier]),
            ("deps", report.environment.get("deps", "")),
        ):
            ET.SubElement(props, "property", name=key, value=clean(value))
        for c in checks:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"smoke.{tier}",
                name=clean(c.id),
                time=f"{c.duration_s:.3f}",
            )
            detail = clean(c.detail)
            first = detail.splitlines()[0] if detail else ""
            if c.outcome == FAILED:
                ET.SubElement(case, "failure", message=first).text = detail
            elif c.outcome == ERROR:
                ET.SubElement(case, "error", message=first).text = detail
            elif c.outcome == NOT_RUN:
                ET.SubElement(case, "skipped", message=f"not run: {first}")
            if c.patches:
                ET.SubElement(case, "system-out").text = "patches: " + clean(", ".join(c.patches))
    for k, v in total.items():
        suites.set(k, str(v))
    # Check details carry what the wheel under test printed: nothing XML 1.0 forbids.
    for element in suites.iter():
        if element.text:
            element.text = xml_text(element.text)
        for key, value in element.attrib.items():
            element.set(key, xml_text(value))
    ET.indent(suites)
    body: bytes = ET.tostring(suites, encoding="utf-8")
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + body + b"\n"
