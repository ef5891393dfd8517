"""A patch file or series.yaml that changes on disk while a command works on it.

A `git pull` in another terminal can land between the check a writer makes
(`check_outside_changes`) and its write. The writer compares what is on disk with what
it read at the moment of the write (after every temporary file is written, just
before the commit point) and refuses when they differ: the file keeps the other
process's bytes, the work tree keeps forkpatch's side, and `status` names both.
Each case pauses forkpatch at that moment (the FORKPATCH_TEST_PAUSE_AFTER hook),
changes the file as the other process would, and lets it go on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from support.cli import env
from support.projects import copy_example, temp_files
from support.reliability import Row

MAIN = "vllm/entrypoints/cli/main.py"
FP8 = "vllm/model_executor/layers/quantization/online/fp8.py"


def _paused(project: Path, *args: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "forkpatch", *args],
        cwd=project,
        env=env(FORKPATCH_TEST_PAUSE_AFTER="commit-files"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status), "forkpatch ended before its pause point"
    return proc


def _go_on(proc: subprocess.Popen[bytes]) -> tuple[int, str]:
    os.kill(proc.pid, signal.SIGCONT)
    _out, err = proc.communicate(timeout=120)
    return proc.returncode, err.decode()


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def _teammate_edits_description(project: Path, name: str) -> Path:
    path = project / "patches" / f"{name}.patch"
    path.write_bytes(b"A teammate's better description.\n\n" + path.read_bytes())
    return path


def _top_edit(project: Path) -> None:
    _append(project / ".forkpatch" / "worktree" / MAIN, "# my edit\n")


def _middle_edit(project: Path) -> None:
    wt = project / ".forkpatch" / "worktree"
    subprocess.run(
        [sys.executable, "-m", "forkpatch", "edit", "odd-width-padding"],
        cwd=project,
        env=env(),
        check=True,
        capture_output=True,
    )
    _append(wt / FP8, "# my edit\n")


# (command, what the user did first, what the other process changes meanwhile)
CASES: dict[str, tuple[tuple[str, ...], Callable[[Path], None], Callable[[Path], Path]]] = {
    "refresh-top-file": (
        ("refresh",),
        _top_edit,
        lambda p: _teammate_edits_description(p, "cli-version"),
    ),
    "refresh-middle-file": (
        ("refresh",),
        _middle_edit,
        lambda p: _teammate_edits_description(p, "odd-width-padding"),
    ),
    "export-file": (
        ("export",),
        lambda p: None,
        lambda p: _teammate_edits_description(p, "cli-version"),
    ),
    "refresh-file-deleted": (
        ("refresh",),
        _top_edit,
        lambda p: (
            (p / "patches" / "cli-version.patch").unlink() or p / "patches" / "cli-version.patch"
        ),
    ),
}


def _export_needs_work(project: Path) -> None:
    """A commit by hand on the top patch: export has something to write."""
    wt = project / ".forkpatch" / "worktree"
    _append(wt / MAIN, "# committed by hand\n")
    genv = {**env(), "GIT_DIR": str(wt / ".git")}
    subprocess.run(
        ["git", "-C", str(wt), "commit", "-q", "-a", "--amend", "--no-edit"], env=genv, check=True
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_file_changed_during_the_write_is_refused_keeping_both(tmp_path, capsys, case):
    args, prepare, meanwhile = CASES[case]
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    prepare(ex.project)
    if args == ("export",):
        _export_needs_work(ex.project)
    proc = _paused(ex.project, *args)
    try:
        changed = meanwhile(ex.project)
        theirs = changed.read_bytes() if changed.exists() else None
    finally:
        code, err = _go_on(proc)
    assert code == 1, err
    assert "changed on disk while forkpatch was working" in err, err
    assert changed.name in err and "nothing was written" in err
    assert "internal error" not in err
    # The other process's version is kept, byte for byte.
    assert (changed.read_bytes() if changed.exists() else None) == theirs
    assert temp_files(ex.project) == []
    if args == ("refresh",):  # the work tree keeps the edit
        assert "# my edit" in "".join(
            (ex.wt / f).read_text() for f in (MAIN, FP8) if (ex.wt / f).exists()
        )
    # status names what changed; nothing claims the two agree.
    _, out, _ = ex.run("status", "--json", expect=None)
    kinds = {(c["name"], c["kind"]) for c in json.loads(out)["changes"]}
    assert kinds, out


def test_no_change_during_the_write_goes_through(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    _top_edit(ex.project)
    proc = _paused(ex.project, "refresh")
    code, err = _go_on(proc)
    assert code == 0, err
    assert "# my edit" in (ex.project / "patches" / "cli-version.patch").read_text()


RELIABILITY = [
    Row(
        "changed outside forkpatch",
        "a patch file or series.yaml changed (or deleted) on disk between a writer's check "
        "and its write",
        f"{len(CASES)} cases",
        "refused at the write, naming the file; the other process's bytes kept, the work "
        "tree keeps forkpatch's side, status names the change",
    ),
]
