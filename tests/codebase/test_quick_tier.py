"""The quick tier (``-m quick``) holds what it says: its paths exist, and leaving the
other test modules uncollected under ``-m quick`` drops none of its tests."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support import REPO_ROOT
from support.tiers import QUICK, QUICK_LEFT_OUT, quick_path

TESTS = REPO_ROOT / "tests"


def test_every_quick_path_is_there():
    missing = [rel for rel in (*QUICK, *QUICK_LEFT_OUT) if not TESTS.joinpath(rel).exists()]
    assert missing == [], "a test file moved: update support/tiers.py"


def _collected(markexpr: str) -> set[str]:
    args = ["-p", "no:cacheprovider", "--collect-only", "-q", "-m", markexpr]
    out = subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {line for line in out.splitlines() if "::" in line}


@pytest.mark.slow
def test_the_quick_tier_collects_its_own_tests_and_no_other():
    quick = _collected("quick")
    # Any other expression collects every module and deselects.
    assert quick == _collected("quick and quick")
    files = {node.split("::", 1)[0].removeprefix("tests/") for node in quick}
    assert all(quick_path(f) for f in files), files
    assert {q for q in QUICK if any(f.startswith(q) for f in files)} == set(QUICK)
