"""A team pytest check through the check server (vllm imported once) is held as a check
of its own process was: a crash, a hang, a server killed under it, a secret it echoes.

This interpreter stands in for the smoke environment (a venv seeing its packages):
the checks need only pytest. The server imports nothing heavy here.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from forkpatch.sections import TeamCheck
from forkpatch.smoke.env import SmokeEnv
from forkpatch.smoke.team import run_team_checks
from support.procs import alive
from support.reliability import Row

SECRET = "pypi-AgEIcHlwaS5vcmcCJDU0secret"

TESTS = """import json, os, signal, subprocess, sys, time

def test_ok():
    pass

def test_segfault():
    os.kill(os.getpid(), signal.SIGSEGV)

def test_abort():
    os.abort()

def test_hangs_with_a_child():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    open(os.environ["CHILD_PID"], "w").write(str(child.pid))
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(300)

def test_kills_the_server():
    with open(os.environ["SERVER_START"]) as fh:
        pid = json.loads(fh.read().strip().splitlines()[-1])["pid"]
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    time.sleep(300)

def test_leaks():
    print(os.environ["TWINE_PASSWORD"])
    assert False, os.environ["TWINE_PASSWORD"]
"""

CRASHES = ["segfault", "abort"]


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, SmokeEnv]:
    import site

    venv = tmp_path / "env" / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = next((venv / "lib").glob("python*/site-packages"))
    (purelib / "zz-test.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    root = tmp_path / "project"
    (root / "team").mkdir(parents=True)
    (root / "team" / "test_ours.py").write_text(TESTS, encoding="utf-8")
    monkeypatch.setenv("CHILD_PID", str(tmp_path / "child.pid"))
    monkeypatch.setenv("SERVER_START", str(tmp_path / "env" / "team-server" / "start.log"))
    monkeypatch.setenv("TWINE_PASSWORD", SECRET)
    senv = SmokeEnv(venv, venv / "bin" / "python", "system", sys.executable, True, None)
    return root, senv


def _run(setup, names: list[str], timeout: int | None = None):
    root, senv = setup
    checks = {
        f"static.{n.replace('_', '-')}": TeamCheck(
            pytest=f"team/test_ours.py::test_{n}", timeout=timeout
        )
        for n in names
    }
    return run_team_checks(
        checks, senv, {}, device={}, root=root, fork_tests=lambda: root, preimport=("json",)
    )


@pytest.mark.parametrize("crash", CRASHES)
def test_a_check_that_crashes_the_fork_fails_alone(setup, crash: str) -> None:
    got = _run(setup, [crash, "ok"])
    name = f"static.{crash}"
    assert got[name].outcome == "failed" and "killed by SIG" in got[name].detail
    assert got["static.ok"].outcome == "passed"


def test_a_hung_check_and_its_children_end_at_its_timeout(setup, tmp_path: Path) -> None:
    t0 = time.monotonic()
    got = _run(setup, ["hangs_with_a_child", "ok"], timeout=2)
    hung = got["static.hangs-with-a-child"]
    assert hung.outcome == "failed" and "timed out after 2 s (its timeout)" in hung.detail
    assert got["static.ok"].outcome == "passed"
    assert time.monotonic() - t0 < 30
    pid = int((tmp_path / "child.pid").read_text())
    end = time.monotonic() + 5
    while time.monotonic() < end and alive(pid):
        time.sleep(0.05)
    assert not alive(pid)


def test_a_server_killed_under_a_check_is_no_silent_pass(setup) -> None:
    got = _run(setup, ["kills_the_server", "ok"], timeout=60)
    # run again on its own (the server is gone then): it passes on its own merits
    assert got["static.kills-the-server"].outcome == "passed"
    assert got["static.ok"].outcome == "passed"


def test_a_secret_a_check_echoes_is_hidden(setup) -> None:
    got = _run(setup, ["leaks"])
    assert got["static.leaks"].outcome == "failed"
    assert SECRET not in got["static.leaks"].detail and "****" in got["static.leaks"].detail


RELIABILITY = [
    Row(
        "external programs",
        "a team pytest check forked from the check server that segfaults or aborts; one "
        "past its timeout ignoring SIGTERM with a child; one that kills the server",
        f"{len(CRASHES)} + 1 + 1 cases",
        "that check fails with the signal or the timeout named, its child ended; the next "
        "check passes; a check under a killed server runs again on its own, never a "
        "silent pass",
    ),
    Row(
        "secrets",
        "TWINE_PASSWORD echoed by a failing team pytest check through the check server",
        "1 check",
        "hidden in its result",
    ),
]
