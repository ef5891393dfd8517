"""The stored smoke report of a wheel (what publish reads) is not replaced by a run
that ran fewer tiers: an sm70 result from a V100 box survives a later static run."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from forkpatch.smoke.report import CheckResult, SmokeReport, WheelEntry, read_report
from forkpatch.smoke.runner import store_report
from support.smoke import passing_report


def _report(wheel: Path, ran: tuple[str, ...], sha: str | None = None) -> SmokeReport:
    sha = sha or hashlib.sha256(wheel.read_bytes()).hexdigest()
    return SmokeReport(
        wheels=[WheelEntry(sha, file=wheel.name)],
        primary_sha256=sha,
        version="1.2.1",
        requested_tiers=list(ran),
        checks=[CheckResult(f"{t}.check", t, "passed") for t in ran],
        environment={},
        device={},
        patches=[],
    )


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
        assert read_report(written).ran() == list(new)
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
    assert read_report(path).ran() == ["static"]
