"""A forkpatch killed while git runs leaves git's lock files behind; the next command
clears them (they are provably stale: the project lock says its holder died) and
goes on, instead of failing on "index.lock: File exists" until the user deletes
.forkpatch."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support.cli import fp_in
from support.git import git, numbered
from support.procs import LockHolder
from support.projects import scratch_fork
from support.reliability import Row


def _project(tmp_path: Path) -> Path:
    fork = scratch_fork(tmp_path / "fork", {"a.txt": numbered(20), "d/b.txt": numbered(5)})
    project = tmp_path / "project"
    project.mkdir()
    code, _, err = fp_in(project, "init", "--fork-url", str(fork.path), "--base", "v1")
    assert code == 0, err
    code, _, err = fp_in(project, "apply")
    assert code == 0, err
    return project


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _interrupted(project: Path, command: str = "apply") -> None:
    """The project lock as a killed forkpatch leaves it: its pid and command."""
    (project / ".forkpatch" / "lock").write_text(f"{_dead_pid()} {command}\n")


STALE_NAMES = ("index.lock", "HEAD.lock", "refs/...lock", "config.lock")

STALE = {
    "work tree index": "worktrees/worktree/index.lock",
    "work tree HEAD": "worktrees/worktree/HEAD.lock",
    "store HEAD": "HEAD.lock",
    "branch ref": "refs/heads/forkpatch/stack.lock",
    "config": "config.lock",
}

RELIABILITY = [
    Row(
        "interruptions",
        "forkpatch killed while git runs: git's lock files left in the store "
        "(" + ", ".join(STALE_NAMES) + "), a work tree left 'initializing', "
        "a real SIGKILL inside `git worktree add`; a git lock with no killed forkpatch",
        f"{len(STALE_NAMES) + 3} cases",
        "the next command removes the killed command's git locks (named in a warning) "
        "and succeeds; a lock that may be a live git's is left and named with the next step",
    )
]


@pytest.mark.parametrize("what", sorted(STALE))
def test_git_locks_of_a_killed_forkpatch_are_cleared(tmp_path, what):
    project = _project(tmp_path)
    store = project / ".forkpatch" / "repo.git"
    lock = store / STALE[what]
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")
    _interrupted(project)
    code, _, err = fp_in(project, "apply")
    assert code == 0, err
    assert "interrupted `forkpatch apply`" in err and STALE[what] in err
    assert not lock.exists()
    wt = project / ".forkpatch" / "worktree"
    assert git(wt, "status", "--porcelain") == ""
    # The lock file is released cleanly now: the next command warns of nothing.
    code, _, err = fp_in(project, "apply")
    assert code == 0 and "interrupted" not in err, err


def test_work_tree_left_initialising_and_then_deleted(tmp_path):
    """Killed inside `git worktree add` (which marks the new work tree locked,
    "initializing"), then the user deleted the half-made directory."""
    project = _project(tmp_path)
    admin = project / ".forkpatch" / "repo.git" / "worktrees" / "worktree"
    (admin / "locked").write_text("initializing")
    (admin / "index.lock").write_text("")
    _interrupted(project)

    shutil.rmtree(project / ".forkpatch" / "worktree")
    code, _, err = fp_in(project, "apply")
    assert code == 0, err
    assert not (admin / "locked").exists() or (admin / "locked").read_text() != "initializing"
    assert git(project / ".forkpatch" / "worktree", "status", "--porcelain") == ""


def test_a_lock_held_by_a_live_git_is_left_alone_and_named(tmp_path):
    """Without a killed forkpatch, a git lock may belong to a live git (the user's):
    it is not removed; the error names the file and the next step."""
    project = _project(tmp_path)
    lock = project / ".forkpatch" / "repo.git" / "worktrees" / "worktree" / "index.lock"
    lock.write_text("")
    code, _, err = fp_in(project, "apply")
    assert code != 0
    assert "index.lock" in err and "remove that file" in err
    assert lock.exists()


def test_a_killed_forkpatch_does_not_clear_a_lock_a_live_process_holds(tmp_path):
    """The previous forkpatch died, but a lock under the store is open in a live
    process right now (the user's own git in the work tree): it is not the killed
    command's, and stays until its holder lets go."""
    project = _project(tmp_path)
    lock = project / ".forkpatch" / "repo.git" / "worktrees" / "worktree" / "HEAD.lock"
    holder = LockHolder(lock)
    try:
        _interrupted(project, "refresh")
        fp_in(project, "status")
        assert lock.exists()
    finally:
        holder.kill()


def test_real_sigkill_inside_git_worktree_add(tmp_path):
    """A real SIGKILL of forkpatch while `git worktree add` runs: a git wrapper on PATH
    runs the real command, leaves what a killed checkout leaves, and kills forkpatch."""
    project = _project(tmp_path)

    real_git = shutil.which("git")
    assert real_git
    fp_in(project, "pop", "--all")
    shutil.rmtree(project / ".forkpatch" / "worktree")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "git"
    wrapper.write_text(
        textwrap.dedent(
            f"""\
            #!/bin/sh
            case " $* " in
              *" worktree add "*)
                "{real_git}" "$@"
                gd=$("{real_git}" -C {project}/.forkpatch/worktree rev-parse --git-dir)
                echo initializing > "$gd/locked"; : > "$gd/index.lock"
                kill -9 $PPID; exit 1 ;;
            esac
            exec "{real_git}" "$@"
            """
        )
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("FORKPATCH_FORK_REPO", None)
    proc = subprocess.run(
        [sys.executable, "-m", "forkpatch", "-C", str(project), "apply"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    code, _, err = fp_in(project, "apply")
    assert code == 0, err
    assert "interrupted `forkpatch apply`" in err
    assert git(project / ".forkpatch" / "worktree", "status", "--porcelain") == ""
