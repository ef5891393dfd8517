"""Smoke's promises about its stored report: the report publish reads is not replaced
by a run of the same wheel with less evidence of a tier (fewer tiers, a tier
incomplete, fewer of its checks); a run in which a tier failed always replaces it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from forkpatch.smoke.report import CheckResult, SmokeReport, WheelEntry
from forkpatch.smoke.runner import store_report
from support.reliability import Row


def _checks_report(wheel: Path, checks: dict[str, str]) -> SmokeReport:
    """A report of ``checks`` (id -> outcome), each in the tier its id names."""
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    tiers = sorted({cid.split(".")[0] for cid in checks}, key=("static", "gpu", "sm70").index)
    return SmokeReport(
        wheels=[WheelEntry(sha, file=wheel.name)],
        primary_sha256=sha,
        version="1.2.1",
        requested_tiers=tiers,
        checks=[
            CheckResult(cid, cid.split(".")[0], outcome, detail="torch is missing")
            for cid, outcome in checks.items()
        ],
        environment={},
        device={},
        patches=[],
    )


P, N, F = "passed", "not-run", "failed"

EVIDENCE = [
    # the same tier, incomplete now (--deps none: torch absent)
    ({"static.a": P, "static.b": P}, {"static.a": P, "static.b": N}, True),
    # the same tier passed, with fewer of its checks run (--checks)
    ({"static.a": P, "static.b": P, "static.c": P}, {"static.a": P}, True),
    ({"static.a": P, "sm70.x": P}, {"static.a": P, "sm70.x": N}, True),
    # a failure replaces: the gate must not read an older pass
    ({"static.a": P, "static.b": P}, {"static.a": F}, False),
    ({"static.a": P, "sm70.x": P}, {"static.a": F}, False),
    # better evidence replaces
    ({"static.a": P, "static.b": N}, {"static.a": P, "static.b": P}, False),
    ({"static.a": P}, {"static.a": P, "static.b": P}, False),
    ({"static.a": P, "static.b": P}, {"static.a": P, "static.b": P}, False),
]


@pytest.mark.parametrize(("stored", "new", "kept"), EVIDENCE)
def test_a_run_with_less_evidence_of_a_tier_does_not_replace_the_stored_one(
    tmp_path, capsys, stored, new, kept
):
    wheel = tmp_path / "1cat_vllm-1.2.1-py3-none-any.whl"
    wheel.write_bytes(b"bytes of a wheel")
    path = tmp_path / "report.json"
    assert store_report(_checks_report(wheel, stored), path) == path
    before = path.read_bytes()
    written = store_report(_checks_report(wheel, new), path)
    err = capsys.readouterr().err
    if kept:
        assert path.read_bytes() == before and written.name.endswith(".latest.json")
        assert "kept" in err and "tier " in err
    else:
        assert written == path
        assert (
            json.loads(path.read_text())["checks"] == _checks_report(wheel, new).to_json()["checks"]
        )


RELIABILITY = [
    Row(
        "publish gate",
        "a second smoke run of the same wheel with less evidence of a tier (--deps none "
        "after a pass, fewer of a tier's checks, fewer tiers), with a failure, with more",
        f"{len(EVIDENCE)} pairs of runs",
        "the stored report stays when the new one is weaker (written beside it as "
        ".latest.json, the warning names the tier); a failure or more evidence replaces it",
        refused=str(sum(kept for _s, _n, kept in EVIDENCE)),
    ),
]
