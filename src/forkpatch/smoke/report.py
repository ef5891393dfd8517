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
import re
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

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
)
from forkpatch.redact import scrub

if TYPE_CHECKING:
    from forkpatch.wheels.identity import Provenance

SCHEMA = 1
PASSED: Final = "passed"
FAILED: Final = "failed"
ERROR: Final = "error"
NOT_RUN: Final = "not-run"
INCOMPLETE: Final = "incomplete"
DECLARED_CHECK_FAILED: Final = "declared-check-failed"
_SHA256 = re.compile(r"\A[0-9a-f]{64}\Z")
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
    for t in TIERS:
        if word == t:
            return t
    raise ValueError(f"{word!r} is not a smoke tier ({', '.join(TIERS)})")


def as_outcome(word: str) -> CheckOutcome:
    """``word`` as a :data:`~forkpatch.kinds.CheckOutcome` (ValueError when it is none)."""
    for o in CHECK_OUTCOMES:
        if word == o:
            return o
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
        tip = "run `forkpatch smoke WHEEL` again to write a fresh report (never edit one by hand)"
        try:
            return _validate(data, source)
        except _Bad as exc:
            raise SmokeError(f"{source}: {exc}", tip=tip) from None


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


class _Bad(Exception):
    pass


def _want(cond: bool, field: str, what: str, value: object) -> None:
    if not cond:
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        raise _Bad(f"field {field} must be {what}, found {shown}")


def _is_str(v: object) -> bool:
    return isinstance(v, str)


def _is_num(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _tier(value: object, field: str, what: str) -> Tier:
    for t in TIERS:
        if value == t:
            return t
    raise _Bad(f"field {field} must be {what} ({', '.join(TIERS)}), found {value!r}")


def _outcome(value: object, field: str) -> CheckOutcome:
    for o in CHECK_OUTCOMES:
        if value == o:
            return o
    _want(False, field, " / ".join(CHECK_OUTCOMES), value)
    raise AssertionError  # _want raised


def _opt(
    entry: Mapping[str, object], key: str, where: str, check: Callable[[object], bool], what: str
) -> object:
    value = entry.get(key)
    if value is not None:
        _want(check(value), f"{where}.{key}", what, value)
    return value


def _wheels(raw: object) -> tuple[WheelEntry, ...]:
    _want(isinstance(raw, list) and bool(raw), "wheels", "a non-empty list", raw)
    assert isinstance(raw, list)
    out = []
    for i, w in enumerate(raw):
        where = f"wheels[{i}]"
        _want(isinstance(w, dict), where, "an object", w)
        assert isinstance(w, dict)
        sha = w.get("sha256")
        _want(
            isinstance(sha, str) and _SHA256.match(sha) is not None,
            f"{where}.sha256",
            "a sha256 (64 lower-case hex digits)",
            sha,
        )
        assert isinstance(sha, str)
        file, name, version = (
            _opt(w, k, where, _is_str, "a string") for k in ("file", "name", "version")
        )
        size = _opt(w, "size", where, _is_int, "a whole number")
        out.append(
            WheelEntry(
                sha,
                file=file if isinstance(file, str) else None,
                name=name if isinstance(name, str) else None,
                version=version if isinstance(version, str) else None,
                size=size if isinstance(size, int) else None,
            )
        )
    return tuple(out)


def _checks(raw: object) -> list[CheckResult]:
    _want(isinstance(raw, list), "checks", "a list", raw)
    assert isinstance(raw, list)
    checks: list[CheckResult] = []
    seen: set[str] = set()
    for i, c in enumerate(raw):
        where = f"checks[{i}]"
        _want(isinstance(c, dict), where, "an object", c)
        assert isinstance(c, dict)
        for key in ("id", "tier", "outcome"):
            if key not in c:
                raise _Bad(f"missing required field {where}.{key}")
        cid = c["id"]
        tier = _tier(c["tier"], f"{where}.tier", "a tier")
        _want(
            isinstance(cid, str) and cid.startswith(f"{tier}.") and len(cid) > len(tier) + 1,
            f"{where}.id",
            f"'{tier}.<name>'",
            cid,
        )
        assert isinstance(cid, str)
        _want(cid not in seen, f"{where}.id", "unique", cid)
        seen.add(cid)
        outcome = _outcome(c["outcome"], f"{where}.outcome")
        duration = c.get("duration_s", 0.0)
        _want(_is_num(duration), f"{where}.duration_s", "a number", duration)
        detail = c.get("detail", "")
        _want(isinstance(detail, str), f"{where}.detail", "a string", detail)
        patches = c.get("patches", [])
        _want(
            isinstance(patches, list) and all(_is_str(p) for p in patches),
            f"{where}.patches",
            "a list of patch names",
            patches,
        )
        checks.append(
            CheckResult(cid, tier, outcome, float(duration), str(detail), [str(p) for p in patches])
        )
    return checks


def _patch_names(raw: object) -> list[str]:
    _want(isinstance(raw, list), "patches", "a list", raw)
    assert isinstance(raw, list)
    names = []
    for i, p in enumerate(raw):
        _want(
            isinstance(p, dict) and _is_str(p.get("name")),
            f"patches[{i}]",
            "an object with a name",
            p,
        )
        assert isinstance(p, dict)
        names.append(str(p["name"]))
    return names


def _provenance(raw: object) -> Provenance | None:
    if raw is None:
        return None
    from forkpatch.wheels.identity import Provenance

    _want(isinstance(raw, dict), "provenance", "an object or null", raw)
    try:
        return Provenance.from_json(json.dumps(raw), source="field provenance")
    except BuildError as exc:
        raise _Bad(exc.message) from None


def _publish(raw: object) -> PublishRecord | None:
    if raw is None:
        return None
    _want(isinstance(raw, dict), "publish", "an object", raw)
    assert isinstance(raw, dict)
    text = {}
    for key in ("target", "file", "sha256", "at", "by"):
        value = raw.get(key)
        _want(_is_str(value), f"publish.{key}", "a string", value)
        text[key] = str(value)
    passed = raw.get("required_tiers_passed", [])
    _want(isinstance(passed, list), "publish.required_tiers_passed", "a list of tiers", passed)
    assert isinstance(passed, list)
    allowed = raw.get("allowed_missing_tiers", {})
    _want(
        isinstance(allowed, dict) and all(_is_str(v) for v in allowed.values()),
        "publish.allowed_missing_tiers",
        "an object of tier -> why",
        allowed,
    )
    assert isinstance(allowed, dict)
    return PublishRecord(
        **text,
        required_tiers_passed=[
            _tier(t, f"publish.required_tiers_passed[{i}]", "a tier") for i, t in enumerate(passed)
        ],
        allowed_missing_tiers={str(k): str(v) for k, v in allowed.items()},
    )


def _validate(data: object, path: Path) -> SmokeReport:
    _want(isinstance(data, dict), "(top level)", "an object", type(data).__name__)
    assert isinstance(data, dict)
    if data.get("kind") != "forkpatch-smoke-report":
        raise _Bad("not a forkpatch smoke report (field kind)")
    schema = data.get("schema")
    if schema != SCHEMA or isinstance(schema, bool):
        raise SmokeError(
            f"{path}: smoke report schema {schema!r} is not {SCHEMA}",
            tip="run `forkpatch smoke` with this forkpatch version",
        )
    for key in ("passed", "wheel", "wheels", "tiers", "checks"):
        if key not in data:
            raise _Bad(f"missing required field {key}")
    _want(isinstance(data["passed"], bool), "passed", "true or false", data["passed"])
    wheel = data["wheel"]
    _want(isinstance(wheel, dict), "wheel", "an object", wheel)
    assert isinstance(wheel, dict)
    primary = wheel.get("sha256")
    _want(
        isinstance(primary, str) and _SHA256.match(primary) is not None,
        "wheel.sha256",
        "a sha256 (64 lower-case hex digits)",
        primary,
    )
    assert isinstance(primary, str)
    version = wheel.get("version", "")
    _want(_is_str(version), "wheel.version", "a string", version)
    wheels = _wheels(data["wheels"])
    _want(primary in {w.sha256 for w in wheels}, "wheel.sha256", "one of wheels[].sha256", primary)
    tiers = data["tiers"]
    _want(isinstance(tiers, dict), "tiers", "an object", tiers)
    assert isinstance(tiers, dict)
    requested_raw = tiers.get("requested")
    _want(
        isinstance(requested_raw, list) and all(t in TIERS for t in requested_raw),
        "tiers.requested",
        f"a list of tiers ({', '.join(TIERS)})",
        requested_raw,
    )
    assert isinstance(requested_raw, list)
    requested = [_tier(t, "tiers.requested", "a tier") for t in requested_raw]
    status = tiers.get("status")
    _want(isinstance(status, dict), "tiers.status", "an object", status)
    assert isinstance(status, dict)
    for t, st in status.items():
        _want(t in TIERS, f"tiers.status.{t}", f"a known tier ({', '.join(TIERS)})", t)
        _want(st in TIER_STATUSES, f"tiers.status.{t}", " / ".join(TIER_STATUSES), st)
    for key in ("not_run", "detail"):
        if key in tiers:
            _want(isinstance(tiers[key], dict), f"tiers.{key}", "an object", tiers[key])
    if "not_run" in tiers:
        for t, why in tiers["not_run"].items():
            _want(_is_str(why), f"tiers.not_run.{t}", "a string", why)
    checks = _checks(data["checks"])
    for key, check in (
        ("started", _is_str),
        ("duration_s", _is_num),
        ("forkpatch_version", _is_str),
        ("series_compared", lambda v: isinstance(v, bool)),
        ("device", lambda v: json_object(v) is not None),
        ("environment", lambda v: json_object(v) is not None),
        ("provenance", lambda v: v is None or isinstance(v, dict)),
        ("patches", lambda v: isinstance(v, list)),
        ("notes", lambda v: isinstance(v, list) and all(_is_str(n) for n in v)),
    ):
        if key in data and not check(data[key]):
            raise _Bad(f"field {key} has the wrong type ({type(data[key]).__name__})")
    derived = derive_tiers(checks, requested)
    for t, st in status.items():
        if st != derived[t].status:
            raise _Bad(
                f"field tiers.status.{t} says {st!r}, but its check results say "
                f"{derived[t].status!r}"
            )
    if data["passed"] != derived_passed(checks):
        raise _Bad(
            f"field passed says {data['passed']}, but its check results say "
            f"{derived_passed(checks)}"
        )
    duration = data.get("duration_s", 0.0)
    return SmokeReport(
        wheels=wheels,
        primary_sha256=primary,
        version=str(version),
        requested_tiers=requested,
        checks=checks,
        environment=json_object(data.get("environment", {})) or {},
        device=json_object(data.get("device", {})) or {},
        patches=_patch_names(data.get("patches", [])),
        provenance=_provenance(data.get("provenance")),
        series_compared=data.get("series_compared") is True,
        started=str(data.get("started", "")),
        duration_s=float(duration),
        notes=[str(n) for n in data.get("notes", [])],
        forkpatch_version=str(data.get("forkpatch_version", "")),
        publish=_publish(data.get("publish")),
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
