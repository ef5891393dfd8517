"""`forkpatch demo` end to end: status --upstream, droppable and a team check on the example."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_demo_answers_upstream_droppable_and_runs_the_team_check(tmp_path):
    from forkpatch.demo import run_demo

    summary = run_demo(tmp_path / "demo")
    assert summary["upstream"]["cli-version"] == "merged"
    assert summary["upstream"]["capability-floor"] == "unknown"
    assert summary["droppable"]["cli-version"] == "droppable"
    assert summary["droppable"]["capability-floor"] == "not-evaluated"
    assert summary["rebase"]["status"]["cli-version"] == "upstreamed"
    assert summary["team_check"] == "passed"
