"""The small-series benchmark still runs: its quick size, one round, every tool ending on
the same tree (the bench checks the trees itself and fails when they differ)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_small_series_bench_runs_its_quick_size(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "FORKPATCH_BENCH_DIR": str(tmp_path)}
    env.pop("FORKPATCH_FORK_REPO", None)
    got = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_small_series.py"), "--quick", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert got.returncode == 0, got.stderr[-3000:]
    doc = json.loads(got.stdout)  # the JSON alone on stdout; tables and progress on stderr
    assert "| forkpatch warm" in got.stderr
    results = {r["scenario"]: r["tools"] for r in doc["results"]}
    assert sorted(results) == ["nostop", "stops"]
    tools = ["git rebase", "forkpatch warm", "forkpatch cold", "git am -3"]
    for scenario, stops in (("stops", 3), ("nostop", 0)):
        assert list(results[scenario]) == tools
        for name in tools:
            summary = results[scenario][name]
            assert summary["stops"] == stops, (scenario, name, summary)
            assert summary["whole"] > 0
    assert results["stops"]["forkpatch cold"]["skip"] is not None  # the middle stop is skipped
