"""The real-fork tier's pre-checks: a missing piece is a skip that names it and the
command that installs it, never an error ("No module named build") in the middle
of a test. These run everywhere (no fork needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO_ROOT, realfork


def test_missing_modules_names_exactly_the_absent_ones():
    assert realfork.missing_modules(["json", "forkpatch_absent_module", "os"]) == [
        "forkpatch_absent_module"
    ]


def test_missing_modules_asks_another_interpreter(tmp_path):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    python = str(bare / "bin" / "python")
    # This interpreter has pytest; a bare venv of it does not.
    assert realfork.missing_modules(["json", "pytest"], python) == ["pytest"]
    assert realfork.missing_modules(["json"], str(tmp_path / "nope"))[0].startswith(
        str(tmp_path / "nope")
    )


def test_modules_or_skip_names_the_piece_and_the_setup_command():
    with pytest.raises(pytest.skip.Exception) as info:
        realfork.modules_or_skip(["json", "forkpatch_absent_module"])
    assert "forkpatch_absent_module" in str(info.value)
    assert "`bash tests/support/setup-real-fork.sh`" in str(info.value)


def test_the_fork_defaults_to_the_fixture_beside_the_repository():
    assert REPO_ROOT.parent / "shared" / "fixtures" / "1cat-vllm.git" == realfork.FIXTURE_FORK
    if realfork.FORK_SOURCE.startswith("the fixture"):
        assert Path(realfork.FORK) == realfork.FIXTURE_FORK


def test_setup_script_is_documented_where_the_skips_point():
    script = REPO_ROOT / "tests" / "support" / "setup-real-fork.sh"
    assert script.is_file()
    readme = (REPO_ROOT / "README.md").read_text()
    assert "bash tests/support/setup-real-fork.sh" in readme
