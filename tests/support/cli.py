"""forkpatch's CLI, run the three ways the tests need.

- :class:`Runner`: in this process in a project directory, output through ``capsys``,
  the exit code asserted;
- :func:`fp_in`: in this process on a project (``-C``), output captured here (no
  fixture needed; the kill hook is off because pytest's environment does not set it);
- :func:`fp`: ``python -m forkpatch`` in a subprocess (kill hooks, locks, signals).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from forkpatch.cli import main as cli_main
from support import HIDDEN_ENV
from support.git import GIT_ENV


class Runner:
    """Runs the forkpatch CLI in-process in a project directory."""

    def __init__(self, cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.cwd = cwd
        self.capsys = capsys

    def __call__(self, *args: str, expect: int | None = 0) -> tuple[int, str, str]:
        self.capsys.readouterr()
        old = Path.cwd()
        os.chdir(self.cwd)
        try:
            code = cli_main(list(args))
        finally:
            os.chdir(old)
        out, err = self.capsys.readouterr()
        if expect is not None:
            assert code == expect, (
                f"forkpatch {' '.join(args)} -> {code}\nstdout:{out}\nstderr:{err}"
            )
        return code, out, err


def env(**extra: str) -> dict[str, str]:
    """The environment of a forkpatch subprocess: the test identity, no tool settings,
    no command server (tests/cmdserver turns it on, in its own runtime directory)."""
    e = {**os.environ, **GIT_ENV, "FORKPATCH_SERVER": "0"}
    for key in HIDDEN_ENV:
        e.pop(key, None)
    e.update(extra)
    return e


def fp(
    cwd: Path, *args: str, extra_env: Mapping[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -m forkpatch ARGS`` in ``cwd``; text output, never raises on exit codes."""
    return subprocess.run(
        [sys.executable, "-m", "forkpatch", *args],
        cwd=cwd,
        check=False,
        env=env(**(extra_env or {})),
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
    )


def fp_in(project: Path, *args: str) -> tuple[int, str, str]:
    """forkpatch's CLI in this process, on ``project`` (-C): (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    saved = os.environ.pop("FORKPATCH_FORK_REPO", None)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli_main(["-C", str(project), *args])
    finally:
        if saved is not None:
            os.environ["FORKPATCH_FORK_REPO"] = saved
    return code, out.getvalue(), err.getvalue()
