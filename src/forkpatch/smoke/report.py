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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forkpatch import __version__
from forkpatch.errors import SmokeError
from forkpatch.fsutil import atomic_write
from forkpatch.redact import scrub
from forkpatch.smoke.incheck import ERROR, FAILED, NOT_RUN, PASSED, TIERS

SCHEMA = 1
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


@dataclass
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
        out: dict[str, dict[str, Any]] = {}
        for tier in TIERS:
            results = [c for c in self.checks if c.tier == tier]
            outcomes = {c.outcome for c in results}
            if tier not in self.requested_tiers:
                status, reason = (
                    NOT_RUN,
                    "not requested (--tier "
                    + (self.requested_tiers[-1] if self.requested_tiers else "?")
                    + ")",
                )
            elif outcomes & {FAILED, ERROR}:
                status, reason = "failed", ""
            elif not results:
                status, reason = NOT_RUN, "no checks"
            elif outcomes == {NOT_RUN}:
                status, reason = NOT_RUN, _common_reason(results)
            elif NOT_RUN in outcomes:
                status = "incomplete"
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
            }
        return out

    @property
    def passed(self) -> bool:
        """No check failed or errored (tiers not run do not make a report fail)."""
        return not any(c.outcome in (FAILED, ERROR) for c in self.checks)

    def per_patch(self) -> list[dict[str, Any]]:
        out = []
        for name in self.patches:
            mine = [c for c in self.checks if name in c.patches]
            outcomes = {c.outcome for c in mine}
            if not mine:
                status = "no-checks"
            elif outcomes & {FAILED, ERROR}:
                status = "failed"
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
                "run": [t for t in TIERS if tiers[t]["status"] in (PASSED, "failed", "incomplete")],
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
    """A report's bytes; credentials in URLs (e.g. an old wheel's fork URL) are hidden."""
    return (json.dumps(scrub(data), indent=2, sort_keys=False) + "\n").encode("utf-8")


def write_report(data: Mapping[str, Any], path: Path) -> Path:
    atomic_write(path, dumps(data))
    return path


def load_report(path: Path) -> dict[str, Any]:
    """A report file, checked for shape; SmokeError when it is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SmokeError(f"{path}: no such smoke report") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise SmokeError(
            f"{path}: not a JSON smoke report ({exc})",
            tip="run `forkpatch smoke WHEEL` again to write a fresh one",
        ) from None
    if not isinstance(data, dict) or data.get("kind") != "forkpatch-smoke-report":
        raise SmokeError(f"{path}: not a forkpatch smoke report")
    if data.get("schema") != SCHEMA:
        raise SmokeError(
            f"{path}: smoke report schema {data.get('schema')!r} is not {SCHEMA}",
            tip="run `forkpatch smoke` with this forkpatch version",
        )
    return data


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
    ET.indent(suites)
    return (
        b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="utf-8") + b"\n"
    )
