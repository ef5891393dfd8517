"""The stored smoke report of a wheel (what publish reads) is not replaced by a run
that ran fewer tiers: an sm70 result from a V100 box survives a later static run."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from forkpatch.smoke.report import CheckResult, SmokeReport, read_report
from forkpatch.smoke.runner import store_report
from support.smoke import passing_report


def _report(wheel: Path, ran: tuple[str, ...], sha: str | None = None) -> dict:
    sha = sha or hashlib.sha256(wheel.read_bytes()).hexdigest()
    return SmokeReport(
        wheels=[{"file": wheel.name, "sha256": sha}],
        primary_sha256=sha,
        version="1.2.1",
        requested_tiers=list(ran),
        checks=[CheckResult(f"{t}.check", t, "passed") for t in ran],
        environment={},
        device={},
        patches=[],
    ).to_json()


@pytest.mark.parametrize(
    ("stored", "new", "kept"),
    [
        (("static", "sm70"), ("static",), True),  # sm70 would be lost: kept
        (("static", "gpu", "sm70"), ("static", "gpu"), True),
        (("static",), ("static", "sm70"), False),  # more tiers: replaced
        (("static", "sm70"), ("static", "sm70"), False),  # the same tiers: newest wins
    ],
)
def test_a_report_with_fewer_tiers_does_not_replace_the_stored_one(
    tmp_path, capsys, stored, new, kept
):
    wheel = tmp_path / "1cat_vllm-1.2.1-py3-none-any.whl"
    wheel.write_bytes(b"not really a wheel, but bytes with a sha256")
    path = passing_report(wheel, stored)
    before = path.read_bytes()
    data = _report(wheel, new)
    written = store_report(data, path)
    err = capsys.readouterr().err
    if kept:
        assert path.read_bytes() == before
        assert written != path and written.name.endswith(".latest.json")
        assert read_report(written).data["tiers"]["run"] == list(new)
        assert "kept" in err and "--report" in err and str(written) in err
    else:
        assert written == path
        assert json.loads(path.read_text())["tiers"]["run"] == list(new)


def test_a_report_for_another_wheel_is_replaced(tmp_path):
    wheel = tmp_path / "1cat_vllm-1.2.1-py3-none-any.whl"
    wheel.write_bytes(b"old bytes")
    path = passing_report(wheel, ("static", "sm70"))
    wheel.write_bytes(b"new bytes: another build")
    assert store_report(_report(wheel, ("static",)), path) == path
    assert read_report(path).data["tiers"]["run"] == ["static"]


def _checks_report(wheel: Path, checks: dict[str, str]) -> dict:
    """A report of ``checks`` (id -> outcome), each in the tier its id names."""
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    tiers = sorted({cid.split(".")[0] for cid in checks}, key=("static", "gpu", "sm70").index)
    return SmokeReport(
        wheels=[{"file": wheel.name, "sha256": sha}],
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
    ).to_json()


P, N, F = "passed", "not-run", "failed"


@pytest.mark.parametrize(
    ("stored", "new", "kept"),
    [
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
    ],
)
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
        assert json.loads(path.read_text())["checks"] == _checks_report(wheel, new)["checks"]
