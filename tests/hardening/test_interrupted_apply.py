"""Ctrl-C (or SIGINT to forkpatch's pid alone) during the first `apply`.

The first `apply` makes the work tree with `git worktree add`, the longest step of a
new project. Interrupted there, forkpatch used to leave a half-made
`.forkpatch/worktree` that `status` did not mention and that the next `apply`
refused ("exists and is not empty"); SIGINT to forkpatch alone killed its git child
with SIGKILL, or left it running, and left git's `index.lock` behind. Now every git
child gets the SIGINT (git removes its locks) and ends with forkpatch; `status` names
a half-made work tree and `apply` makes it again. Each delay below lands the signal
at another point of the command; the same things must hold wherever it lands.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.cli import env, fp
from support.git import ScratchRepo
from support.reliability import Row

# Past start-up (a Ctrl-C while the CLI loads is entry.py's): the work being done.
DELAYS = (0.8, 1.5, 2.5, 4.0)
FILES = 3000


@pytest.fixture(scope="module")
def big_fork(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bigfork")
    fork = ScratchRepo(root / "fork")
    for d in range(FILES // 100):
        for f in range(100):
            path = fork.path / "pkg" / f"d{d}" / f"f{f}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"x = {d * f}\n")
    fork.git("add", "-A")
    fork.commit("base")
    fork.tag("v1")
    return fork.path


def _project(tmp_path: Path, fork: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    got = fp(project, "init", "--fork-url", str(fork), "--base", "v1")
    assert got.returncode == 0, got.stderr
    return project


def _running_in(project: Path) -> list[str]:
    """Command lines of live processes that name the project (forkpatch's git children)."""
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if str(project) in cmd and int(pid) != os.getpid():
            found.append(cmd)
    return found


def _locks(project: Path) -> list[str]:
    store = project / ".forkpatch" / "repo.git"
    return (
        sorted(str(p.relative_to(store)) for p in store.rglob("*.lock")) if store.is_dir() else []
    )


@pytest.mark.slow
@pytest.mark.parametrize("delay", DELAYS)
def test_sigint_to_the_first_apply_leaves_nothing_running_and_apply_rebuilds(
    big_fork, tmp_path, delay
):
    project = _project(tmp_path, big_fork)
    proc = subprocess.Popen(
        [sys.executable, "-m", "forkpatch", "apply"],
        cwd=project,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # the signal goes to forkpatch's pid alone
    )
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGINT)
    _out, err = proc.communicate(timeout=120)
    finished = proc.returncode == 0
    if not finished:
        assert proc.returncode == 130, err
        assert "Traceback" not in err.decode()
    # forkpatch's children end with it, and take their locks with them.
    deadline = time.monotonic() + 2
    while _running_in(project) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _running_in(project) == []
    assert _locks(project) == []
    wt = project / ".forkpatch" / "worktree"
    status = fp(project, "status")
    assert status.returncode == 0, status.stderr
    if not finished and wt.is_dir() and any(wt.iterdir()):
        assert "interrupted `forkpatch apply` left half made" in status.stderr, status.stderr
    again = fp(project, "apply", timeout=300)
    assert again.returncode == 0, again.stderr
    assert "exists and is not empty" not in again.stderr
    clean = subprocess.run(
        ["git", "-C", str(wt), "status", "--porcelain"], capture_output=True, text=True, env=env()
    )
    assert clean.returncode == 0 and clean.stdout == ""
    assert (wt / "pkg" / "d0" / "f0.py").exists()
    assert "interrupted" not in fp(project, "status").stderr


@pytest.mark.slow
def test_a_half_made_work_tree_with_edits_is_not_rebuilt(big_fork, tmp_path):
    """A work tree of this project that state.json does not record, holding a change of
    someone's: refused, naming it, never removed."""
    project = _project(tmp_path, big_fork)
    assert fp(project, "apply").returncode == 0
    wt = project / ".forkpatch" / "worktree"
    (wt / "pkg" / "d0" / "f0.py").write_text("x = 'mine'\n")
    (project / ".forkpatch" / "state.json").unlink()
    got = fp(project, "apply")
    assert got.returncode == 1, got.stderr
    assert "uncommitted changes" in got.stderr and "pkg/d0/f0.py" in got.stderr
    assert (wt / "pkg" / "d0" / "f0.py").read_text() == "x = 'mine'\n"


RELIABILITY = [
    Row(
        "interruptions",
        "SIGINT to forkpatch's pid alone during the first `apply` (the work tree being made)",
        f"{len(DELAYS)} moments",
        "no git child left running, no git lock left; `status` names a half-made work "
        "tree, the next `apply` makes it again; a work tree with someone's edits is "
        "never removed",
    ),
]
