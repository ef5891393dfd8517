"""A patch file or series.yaml entry changed outside forkpatch is never written over.

Each variant changes patches/ or series.yaml as a `git pull` or a hand edit would,
while the work tree is applied; every command that writes patches/ from the work
tree must then refuse and leave the bytes alone, and `apply` must take the change
into a work tree without edits of its own. With an edit of its own in the work
tree too (both sides changed), every command that writes patches/ or rebuilds the
work tree refuses, and both the change and the edit survive.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from support.projects import copy_example, snapshot
from support.reliability import Row

TOP = "cli-version"
MAIN = "vllm/entrypoints/cli/main.py"
NOTES = (
    "Operator notes.\n\ndiff --git a/NOTES.md b/NOTES.md\nnew file mode 100644\n"
    "--- /dev/null\n+++ b/NOTES.md\n@@ -0,0 +1 @@\n+V100 notes\n"
)


def _block(series: str, name: str) -> str:
    start = series.index(f"  - name: {name}\n")
    end = series.find("  - name: ", start + 1)
    return series[start : end if end >= 0 else len(series)]


def _sub(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, (old, text)
    path.write_text(text.replace(old, new))


def _patch(p: Path) -> Path:
    return p / "patches" / f"{TOP}.patch"


def _series(p: Path) -> Path:
    return p / "series.yaml"


def _rename(p: Path, *, name: bool) -> None:
    shutil.move(_patch(p), p / "patches" / "0004-cli.patch")
    _sub(_series(p), f"file: {TOP}.patch", "file: 0004-cli.patch")
    if name:
        _sub(_series(p), f"name: {TOP}\n", "name: cli-version-string\n")


def _remove(p: Path) -> None:
    text = _series(p).read_text()
    _series(p).write_text(text.replace(_block(text, TOP), ""))
    _patch(p).unlink()


def _add_below(p: Path) -> None:
    (p / "patches" / "notes.patch").write_text(NOTES)
    text = _series(p).read_text()
    block = _block(text, TOP)
    new = "  - name: notes\n    file: notes.patch\n    summary: notes\n"
    _series(p).write_text(text.replace(block, new + block))


def _reorder(p: Path) -> None:
    text = _series(p).read_text()
    a, b = _block(text, "eager-block-cast"), _block(text, TOP)
    _series(p).write_text(text.replace(a + b, b + a))


# Each changes patches/ and series.yaml as a teammate's pull would (the top patch, or
# series.yaml's entries below it).
VARIANTS: dict[str, Callable[[Path], None]] = {
    "a body line modified": lambda p: _sub(
        _patch(p),
        "+                        version=VLLM_VERSION)\n",
        "+    version=VLLM_VERSION)\n",
    ),
    "a description line modified": lambda p: _sub(
        _patch(p), "The wheel installs", "The 1Cat wheel installs"
    ),
    "the file renamed (series.yaml too)": lambda p: _rename(p, name=False),
    "the patch renamed (name and file)": lambda p: _rename(p, name=True),
    "the entry and its file removed": _remove,
    "an entry added below the top": _add_below,
    "entries reordered": _reorder,
}
# Commands that write patches/ from the work tree: each must refuse.
WRITERS = [("export",), ("export", "--offsets"), ("refresh",), ("refresh", "--offsets")]
# With an edit of the work tree's own as well: these must refuse too.
BOTH = [*WRITERS, ("apply",), ("edit", "capability-floor"), ("push",), ("pop",)]


@pytest.fixture
def applied(tmp_path: Path, capsys):
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    return ex


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_writers_refuse_and_apply_takes_the_change(applied, variant: str) -> None:
    VARIANTS[variant](applied.project)
    theirs = snapshot(applied.project)
    for args in WRITERS:
        code, _, err = applied.run(*args, expect=None)
        assert code == 1, (args, err)
        assert "outside forkpatch" in err and "Traceback" not in err, (args, err)
        assert snapshot(applied.project) == theirs, args
    applied.run("apply")  # no edits of its own: takes the change, without --force
    applied.run("export")
    assert snapshot(applied.project) == theirs


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_both_sides_changed_is_refused_by_every_command(applied, variant: str) -> None:
    main = applied.wt / MAIN
    mine = main.read_text() + "# my edit\n"
    main.write_text(mine)
    VARIANTS[variant](applied.project)
    theirs = snapshot(applied.project)
    for args in BOTH:
        code, _, err = applied.run(*args, expect=None)
        assert code == 1, (args, err)
        assert "Traceback" not in err and "internal error" not in err, (args, err)
        assert snapshot(applied.project) == theirs, args
        assert main.read_text() == mine, args


RELIABILITY = [
    Row(
        "changed outside forkpatch",
        "a patch file or series.yaml entry changed by a pull or by hand while a work tree "
        "exists (" + ", ".join(sorted(VARIANTS)) + ")",
        f"{len(VARIANTS)} changes x {len(WRITERS)} writers (export, refresh)",
        "each writer refused naming the change, patches/ and series.yaml unchanged; "
        "`apply` then takes it without --force and export changes nothing",
        refused=str(len(VARIANTS) * len(WRITERS)),
    ),
    Row(
        "changed outside forkpatch",
        "the same changes with an edit in the work tree too (both sides changed)",
        f"{len(VARIANTS)} changes x {len(BOTH)} commands (writers, apply, edit, push, pop)",
        "every command refused; the outside change and the work tree's edit both kept",
        refused=str(len(VARIANTS) * len(BOTH)),
    ),
]
