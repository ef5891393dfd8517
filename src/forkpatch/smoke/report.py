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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forkpatch import __version__
from forkpatch.errors import SmokeError
from forkpatch.escape import xml_text
from forkpatch.fsutil import atomic_write, read_regular
from forkpatch.redact import scrub
from forkpatch.smoke.incheck import ERROR, FAILED, NOT_RUN, PASSED, TIERS

SCHEMA = 1
OUTCOMES = (PASSED, FAILED, NOT_RUN, ERROR)
INCOMPLETE = "incomplete"
DECLARED_CHECK_FAILED = "declared-check-failed"
TIER_STATUSES = (PASSED, "failed", INCOMPLETE, NOT_RUN)
_SHA256 = re.compile(r"\A[0-9a-f]{64}\Z")
REPORT_SUFFIX = ".smoke.json"
STORE = Path(".forkpatch") / "smoke"


@dataclass
class CheckResult:
    id: str
    tier: str
    outcome: str  # passed / failed / not-run / error
    duration_s: float = 0.0
    detail: str = ""
    patches: list[str] = field(default_factory=list)  # [] for baseline checks

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tier": self.tier,
            "outcome": self.outcome,
            "duration_s": self.duration_s,
            "detail": self.detail,
            "patches": self.patches,
        }


@dataclass(frozen=True)
class SmokeReport:
    wheels: list[dict[str, Any]]
    primary_sha256: str
    version: str
    requested_tiers: list[str]
    checks: list[CheckResult]
    environment: dict[str, Any]
    device: dict[str, Any]
    patches: list[str]  # from the wheel's provenance, in order
    provenance: dict[str, Any] | None = None
    series_compared: bool = False
    started: str = ""
    duration_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    # ------------------------------------------------------------- derived

    def tier_status(self) -> dict[str, dict[str, Any]]:
        return derive_tiers(self.checks, self.requested_tiers)

    @property
    def passed(self) -> bool:
        """No check failed or errored (tiers not run do not make a report fail)."""
        return derived_passed(self.checks)

    def status(self, tier: str) -> str:
        """``tier``'s status (passed / failed / incomplete / not-run), from the checks."""
        return str(self.tier_status()[tier]["status"])

    def statuses(self) -> dict[str, str]:
        """Every tier's status, in tier order (the report's ``tiers.status``)."""
        return {t: str(s["status"]) for t, s in self.tier_status().items()}

    def not_run(self) -> dict[str, str]:
        """The tiers that did not run, each with why (the report's ``tiers.not_run``)."""
        return {
            t: str(s["reason"]) for t, s in self.tier_status().items() if s["status"] == NOT_RUN
        }

    def ran(self) -> list[str]:
        """The tiers that ran (passed, failed or incomplete), in tier order."""
        return ran_tiers(self.tier_status())

    def failed(self) -> list[CheckResult]:
        """The checks that failed or errored, in report order."""
        return [c for c in self.checks if c.outcome in (FAILED, ERROR)]

    def outcomes(self) -> dict[str, str]:
        """Each check's outcome by id."""
        return {c.id: c.outcome for c in self.checks}

    def per_patch(self) -> list[dict[str, Any]]:
        """Each patch with the checks it declares (``smoke:``) and how they went. A patch
        whose declared check failed is ``declared-check-failed``, not "failed": a check
        is broken by whichever patch broke it, and only ``--bisect`` says which."""
        out = []
        for name in self.patches:
            mine = [c for c in self.checks if name in c.patches]
            outcomes = {c.outcome for c in mine}
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
            out.append({"name": name, "status": status, "checks": {c.id: c.outcome for c in mine}})
        return out

    def to_json(self) -> dict[str, Any]:
        tiers = self.tier_status()
        return {
            "schema": SCHEMA,
            "kind": "forkpatch-smoke-report",
            "forkpatch_version": __version__,
            "started": self.started,
            "duration_s": round(self.duration_s, 3),
            "passed": self.passed,
            "wheel": {"sha256": self.primary_sha256, "version": self.version},
            "wheels": self.wheels,
            "tiers": {
                "requested": self.requested_tiers,
                "run": ran_tiers(tiers),
                "not_run": {t: tiers[t]["reason"] for t in TIERS if tiers[t]["status"] == NOT_RUN},
                "status": {t: tiers[t]["status"] for t in TIERS},
                "detail": tiers,
            },
            "device": self.device,
            "environment": self.environment,
            "patches": self.per_patch(),
            "provenance": self.provenance,
            "series_compared": self.series_compared,
            "checks": [c.to_json() for c in self.checks],
            "notes": self.notes,
        }


def derive_tiers(
    checks: Sequence[CheckResult], requested: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Each tier's status, from the individual check results: the only source of truth
    (a report's own summary is checked against this, never trusted)."""
    out: dict[str, dict[str, Any]] = {}
    for tier in TIERS:
        results = [c for c in checks if c.tier == tier]
        outcomes = {c.outcome for c in results}
        if tier not in requested:
            status, reason = (
                NOT_RUN,
                "not requested (--tier " + (requested[-1] if requested else "?") + ")",
            )
        elif outcomes & {FAILED, ERROR}:
            status, reason = "failed", ""
        elif not results:
            status, reason = NOT_RUN, "no checks"
        elif outcomes == {NOT_RUN}:
            status, reason = NOT_RUN, _common_reason(results)
        elif NOT_RUN in outcomes:
            status = INCOMPLETE
            reason = "; ".join(f"{c.id}: {c.detail}" for c in results if c.outcome == NOT_RUN)
        else:
            status, reason = PASSED, ""
        out[tier] = {
            "status": status,
            "reason": reason,
            "checks": {
                o: sum(1 for c in results if c.outcome == o)
                for o in (PASSED, FAILED, ERROR, NOT_RUN)
            },
            # How many of the tier's built-in checks ran (passed, failed or errored).
            "ran": sum(1 for c in results if c.outcome != NOT_RUN),
            "of": builtin_count(tier),
        }
    return out


def builtin_count(tier: str) -> int:
    """How many checks forkpatch itself has in ``tier``."""
    from forkpatch.checkids import CHECK_IDS, HOST_CHECK_IDS

    return sum(1 for cid in (*CHECK_IDS, *HOST_CHECK_IDS) if cid.partition(".")[0] == tier)


def ran_tiers(tiers: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Of :func:`derive_tiers`'s result, the tiers that ran, in tier order."""
    return [t for t in TIERS if tiers[t]["status"] in (PASSED, "failed", INCOMPLETE)]


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


def dumps(data: Mapping[str, Any]) -> bytes:
    """A report's bytes; credentials in URLs (e.g. an old wheel's fork URL) and the
    values of the environment's credentials (a failing check that echoed them) hidden."""
    return (json.dumps(scrub(data), indent=2, sort_keys=False) + "\n").encode("utf-8")


def write_report(data: Mapping[str, Any], path: Path) -> Path:
    atomic_write(path, dumps(data))
    return path


@dataclass(frozen=True)
class CheckedReport:
    """A smoke report that passed :func:`validate_report`, with its tiers derived."""

    path: Path
    data: dict[str, Any]
    checks: tuple[CheckResult, ...]
    requested: tuple[str, ...]
    sha256s: frozenset[str]
    tiers: Mapping[str, Mapping[str, Any]]  # derive_tiers(checks, requested)

    @property
    def passed(self) -> bool:
        return derived_passed(self.checks)

    def status(self, tier: str) -> str:
        return str(self.tiers[tier]["status"])

    def reason(self, tier: str) -> str:
        return str(self.tiers[tier]["reason"])

    @property
    def primary_sha256(self) -> str:
        """The sha256 of the wheel the report is for (``wheel.sha256``)."""
        return str(self.data["wheel"]["sha256"])

    @property
    def started(self) -> str:
        return str(self.data.get("started") or "")

    @property
    def deps(self) -> str | None:
        """How the smoke environment got the wheel's dependencies (system / none / ...)."""
        deps = self.data.get("environment", {}).get("deps")
        return deps if isinstance(deps, str) else None

    def ran(self) -> list[str]:
        """The tiers that ran (passed, failed or incomplete), from the check results."""
        return ran_tiers(self.tiers)


def read_report(path: Path) -> CheckedReport:
    """Read and validate a smoke report file; SmokeError naming the file and field."""
    try:
        raw = read_regular(path)
    except FileNotFoundError:
        raise SmokeError(f"{path}: no such smoke report") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise SmokeError(
            f"{path}: not a JSON smoke report ({exc})",
            tip="run `forkpatch smoke WHEEL` again to write a fresh one",
        ) from None
    return validate_report(data, path=Path(path))


class _Bad(Exception):
    pass


def validate_report(data: object, *, path: Path) -> CheckedReport:
    """Check a report against the schema strictly (types, known values, required
    fields), then check that its summary (``passed``, ``tiers.status``) is what its
    own check results give. Anything else is a SmokeError naming ``path`` and the
    field: a report is evidence for publishing, so nothing in it is taken on trust.
    """
    tip = "run `forkpatch smoke WHEEL` again to write a fresh report (never edit one by hand)"
    try:
        return _validate(data, path)
    except _Bad as exc:
        raise SmokeError(f"{path}: {exc}", tip=tip) from None


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


def _validate(data: object, path: Path) -> CheckedReport:
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
    _want(
        _SHA256.match(str(wheel.get("sha256"))) is not None and _is_str(wheel.get("sha256")),
        "wheel.sha256",
        "a sha256 (64 lower-case hex digits)",
        wheel.get("sha256"),
    )
    wheels = data["wheels"]
    _want(isinstance(wheels, list) and bool(wheels), "wheels", "a non-empty list", wheels)
    shas = set()
    for i, w in enumerate(wheels):
        _want(isinstance(w, dict), f"wheels[{i}]", "an object", w)
        sha = w.get("sha256")
        _want(
            _is_str(sha) and _SHA256.match(sha) is not None,
            f"wheels[{i}].sha256",
            "a sha256 (64 lower-case hex digits)",
            sha,
        )
        if "file" in w:
            _want(_is_str(w["file"]), f"wheels[{i}].file", "a string", w["file"])
        shas.add(sha)
    _want(wheel["sha256"] in shas, "wheel.sha256", "one of wheels[].sha256", wheel["sha256"])
    tiers = data["tiers"]
    _want(isinstance(tiers, dict), "tiers", "an object", tiers)
    requested = tiers.get("requested")
    _want(
        isinstance(requested, list) and all(t in TIERS for t in requested),
        "tiers.requested",
        f"a list of tiers ({', '.join(TIERS)})",
        requested,
    )
    status = tiers.get("status")
    _want(isinstance(status, dict), "tiers.status", "an object", status)
    for t, st in status.items():
        _want(t in TIERS, f"tiers.status.{t}", f"a known tier ({', '.join(TIERS)})", t)
        _want(st in TIER_STATUSES, f"tiers.status.{t}", " / ".join(TIER_STATUSES), st)
    for key in ("not_run", "detail"):
        if key in tiers:
            _want(isinstance(tiers[key], dict), f"tiers.{key}", "an object", tiers[key])
    if "not_run" in tiers:
        for t, why in tiers["not_run"].items():
            _want(_is_str(why), f"tiers.not_run.{t}", "a string", why)
    checks_raw = data["checks"]
    _want(isinstance(checks_raw, list), "checks", "a list", checks_raw)
    checks: list[CheckResult] = []
    seen: set[str] = set()
    for i, c in enumerate(checks_raw):
        where = f"checks[{i}]"
        _want(isinstance(c, dict), where, "an object", c)
        for key in ("id", "tier", "outcome"):
            if key not in c:
                raise _Bad(f"missing required field {where}.{key}")
        cid, tier, outcome = c["id"], c["tier"], c["outcome"]
        _want(tier in TIERS, f"{where}.tier", f"a tier ({', '.join(TIERS)})", tier)
        _want(
            _is_str(cid) and cid.startswith(f"{tier}.") and len(cid) > len(tier) + 1,
            f"{where}.id",
            f"'{tier}.<name>'",
            cid,
        )
        _want(cid not in seen, f"{where}.id", "unique", cid)
        seen.add(cid)
        _want(outcome in OUTCOMES, f"{where}.outcome", " / ".join(OUTCOMES), outcome)
        duration = c.get("duration_s", 0.0)
        _want(_is_num(duration), f"{where}.duration_s", "a number", duration)
        detail = c.get("detail", "")
        _want(_is_str(detail), f"{where}.detail", "a string", detail)
        patches = c.get("patches", [])
        _want(
            isinstance(patches, list) and all(_is_str(p) for p in patches),
            f"{where}.patches",
            "a list of patch names",
            patches,
        )
        checks.append(CheckResult(cid, tier, outcome, float(duration), detail, list(patches)))
    for key, check in (
        ("started", _is_str),
        ("duration_s", _is_num),
        ("series_compared", lambda v: isinstance(v, bool)),
        ("device", lambda v: isinstance(v, dict)),
        ("environment", lambda v: isinstance(v, dict)),
        ("provenance", lambda v: v is None or isinstance(v, dict)),
        ("patches", lambda v: isinstance(v, list)),
        ("notes", lambda v: isinstance(v, list) and all(_is_str(n) for n in v)),
    ):
        if key in data and not check(data[key]):
            raise _Bad(f"field {key} has the wrong type ({type(data[key]).__name__})")
    derived = derive_tiers(checks, requested)
    for t, st in status.items():
        if st != derived[t]["status"]:
            raise _Bad(
                f"field tiers.status.{t} says {st!r}, but its check results say "
                f"{derived[t]['status']!r}"
            )
    if data["passed"] != derived_passed(checks):
        raise _Bad(
            f"field passed says {data['passed']}, but its check results say "
            f"{derived_passed(checks)}"
        )
    return CheckedReport(
        path=path,
        data=data,
        checks=tuple(checks),
        requested=tuple(requested),
        sha256s=frozenset(shas),
        tiers=derived,
    )


def store_path(project_root: Path, sha256: str) -> Path:
    return project_root / STORE / f"{sha256}.json"


def beside_wheel(wheel: Path) -> Path:
    return wheel.with_name(wheel.name + REPORT_SUFFIX)


# --------------------------------------------------------------------------- JUnit


def junit_xml(data: Mapping[str, Any]) -> bytes:
    """JUnit XML: one <testsuite> per tier, one <testcase> per check.

    not-run checks are <skipped> with the reason (CI shows them as skipped,
    never green-passed); failed ones <failure>, errors <error>.
    """
    data = scrub(data)  # what a check printed may hold the environment's credentials
    suites = ET.Element("testsuites", name="forkpatch smoke")
    version = data.get("wheel", {}).get("version", "")
    total = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for tier in TIERS:
        checks = [c for c in data.get("checks", []) if c["tier"] == tier]
        counts = {
            "tests": len(checks),
            "failures": sum(c["outcome"] == FAILED for c in checks),
            "errors": sum(c["outcome"] == ERROR for c in checks),
            "skipped": sum(c["outcome"] == NOT_RUN for c in checks),
        }
        for k in total:
            total[k] += counts[k]
        attrs = {
            "name": f"smoke.{tier}",
            "time": f"{sum(c['duration_s'] for c in checks):.3f}",
            "timestamp": str(data.get("started", "")),
            **{k: str(v) for k, v in counts.items()},
        }
        suite = ET.SubElement(suites, "testsuite", attrs)
        props = ET.SubElement(suite, "properties")
        for key, value in (
            ("wheel.sha256", data.get("wheel", {}).get("sha256", "")),
            ("wheel.version", version),
            ("tier.status", data.get("tiers", {}).get("status", {}).get(tier, "")),
            ("deps", data.get("environment", {}).get("deps", "")),
        ):
            ET.SubElement(props, "property", name=key, value=str(value))
        for c in checks:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"smoke.{tier}",
                name=c["id"],
                time=f"{c['duration_s']:.3f}",
            )
            detail = c.get("detail", "")
            first = detail.splitlines()[0] if detail else ""
            if c["outcome"] == FAILED:
                ET.SubElement(case, "failure", message=first).text = detail
            elif c["outcome"] == ERROR:
                ET.SubElement(case, "error", message=first).text = detail
            elif c["outcome"] == NOT_RUN:
                ET.SubElement(case, "skipped", message=f"not run: {first}")
            if c.get("patches"):
                ET.SubElement(case, "system-out").text = "patches: " + ", ".join(c["patches"])
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
