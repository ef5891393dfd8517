"""Where a regular file is expected, only a regular file is read, and only so much of it.

A patch file, series.yaml, a state file, a file to import, a smoke report or a wheel
that is a link to a device, a directory, a FIFO or a file larger than forkpatch reads
is refused with an error naming the path: never unbounded memory, a hang or a
traceback. Every case runs forkpatch in a subprocess with a deadline, so a hang fails
the case instead of the suite.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from forkpatch.errors import InputFileError
from forkpatch.fsutil import READ_LIMIT, read_regular
from forkpatch.smoke.report import read_report
from support.cli import fp, fp_in
from support.git import file_diff
from support.projects import project_with_patches
from support.reliability import Row

FILES = {"vllm/x.py": "a\nb\nc\n"}
PATCHES = [("p1", file_diff("vllm/x.py", "a\nb\nc\n", "a\nB\nc\n"))]


def _replace(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    elif path.exists() or path.is_symlink():
        path.unlink()


# What the expected file is turned into; the message forkpatch must give.
KINDS: dict[str, tuple[Callable[[Path], None], str]] = {
    "a link to /dev/zero": (lambda p: p.symlink_to("/dev/zero"), "character device"),
    "a link to /dev/urandom": (lambda p: p.symlink_to("/dev/urandom"), "character device"),
    "a directory": (lambda p: p.mkdir(), "a directory"),
    "a FIFO": (lambda p: os.mkfifo(p), "a FIFO"),
    "a file over the size limit": (
        lambda p: os.truncate(p.write_bytes(b"") or p, READ_LIMIT + 1),
        "more than forkpatch reads",
    ),
}


def _project(tmp_path: Path) -> Path:
    project, _fork = project_with_patches(tmp_path, FILES, PATCHES)
    code, _, err = fp_in(project, "apply")
    assert code == 0, err
    return project


# Which file is replaced, and the command that reads it.
READERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "patches/p1.patch (status)": ("patches/p1.patch", ("status",)),
    "series.yaml (status)": ("series.yaml", ("status",)),
    ".forkpatch/state.json (top)": (".forkpatch/state.json", ("top",)),
    "a file to import (import)": ("../incoming.patch", ("import", "../incoming.patch")),
    "a wheel to verify (verify)": (
        "../x-1-py3-none-any.whl",
        ("verify", "../x-1-py3-none-any.whl"),
    ),
}
# forkpatch's own state files are never read through a link; a wheel is streamed
# (bounded memory whatever its size), so only its kind is checked.
NO_LINKS = {".forkpatch/state.json (top)"}
STREAMED = {"a wheel to verify (verify)": "not a zip file"}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("reader", list(READERS))
def test_non_regular_input_is_refused_naming_it(tmp_path: Path, reader: str, kind: str) -> None:
    project = _project(tmp_path)
    rel, args = READERS[reader]
    make, message = KINDS[kind]
    if reader in NO_LINKS and kind.startswith("a link"):
        message = "is a symbolic link"
    if reader in STREAMED and kind == "a file over the size limit":
        message = STREAMED[reader]
    target = project / rel
    _replace(target)
    make(target)
    proc = fp(project, *args, timeout=60)
    assert proc.returncode in (1, 2), (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    assert target.name in proc.stderr, proc.stderr
    if proc.returncode == 1:  # 2: click refused a directory before forkpatch saw it
        assert message in proc.stderr, proc.stderr


@pytest.mark.parametrize("kind", list(KINDS))
def test_smoke_report_must_be_a_regular_file(tmp_path: Path, kind: str) -> None:
    make, message = KINDS[kind]
    path = tmp_path / "report.json"
    make(path)
    with pytest.raises(InputFileError, match=message) as info:
        read_report(path)
    assert str(path) in info.value.message


def test_a_link_where_none_may_be_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("{}")
    link = tmp_path / "state.json"
    link.symlink_to(real)
    assert read_regular(link) == b"{}"
    with pytest.raises(InputFileError, match="symbolic link"):
        read_regular(link, follow=False)


def test_a_fifo_at_a_write_target_is_replaced_not_read(tmp_path: Path) -> None:
    """refresh writes patches/p1.patch where a FIFO stands: replaced, never read (a hang)."""
    project = _project(tmp_path)
    (project / ".forkpatch" / "worktree" / "vllm" / "x.py").write_text("a\nB\nC\n")
    target = project / "patches" / "p1.patch"
    text = target.read_bytes()
    target.unlink()
    os.mkfifo(target)
    proc = fp(project, "refresh", timeout=60)
    assert proc.returncode == 1 and "a FIFO" in proc.stderr, proc.stderr
    target.unlink()
    target.write_bytes(text)
    assert fp(project, "refresh", timeout=60).returncode == 0


RELIABILITY = [
    Row(
        "bad input: not a regular file",
        "a patch file, series.yaml, state.json, a file to import or a wheel that is a link "
        "to /dev/zero or /dev/urandom, a directory, a FIFO or a file over the size limit",
        f"{len(READERS)} readers x {len(KINDS)} kinds",
        "refused naming the path (not a regular file / larger than forkpatch reads); never a "
        "hang, unbounded memory or a traceback",
        refused=str(len(READERS) * len(KINDS)),
    ),
    Row(
        "bad input: not a regular file",
        "a smoke report of each kind; a state file that is a link; a FIFO where refresh "
        "writes a patch",
        f"{len(KINDS) + 2} cases",
        "refused naming the path; the FIFO is never opened for reading",
        refused=str(len(KINDS) + 2),
    ),
]
