"""The wheel build keeps its shape: one entry point over builders behind a Protocol,
typed throughout (no ``Any``), its wheels committed into dist/ in one place."""

from __future__ import annotations

import ast
from pathlib import Path

import forkpatch.wheels.buildwheel as buildwheel
from forkpatch import kinds

SOURCE = Path(buildwheel.__file__).read_text(encoding="utf-8")
TREE = ast.parse(SOURCE)


def _function(name: str) -> ast.FunctionDef:
    return next(n for n in ast.walk(TREE) if isinstance(n, ast.FunctionDef) and n.name == name)


def test_build_wheel_is_short():
    fn = _function("build_wheel")
    assert fn.end_lineno is not None and fn.end_lineno - fn.lineno + 1 < 40


def test_the_build_module_uses_no_any():
    names = {n.id for n in ast.walk(TREE) if isinstance(n, ast.Name)}
    imported = {a.name for n in ast.walk(TREE) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert "Any" not in names | imported


def test_dist_is_written_once_by_the_entry_point():
    """Both builders stage their wheels; only build_wheel commits them into dist/."""
    callers = {
        fn.name
        for fn in ast.walk(TREE)
        if isinstance(fn, ast.FunctionDef)
        for call in ast.walk(fn)
        if isinstance(call, ast.Call)
        and isinstance(call.func, (ast.Name, ast.Attribute))
        and (call.func.id if isinstance(call.func, ast.Name) else call.func.attr)
        in {"commit_dist", "dist_changes"}
    }
    assert callers == {"build_wheel"}


def test_each_builder_mode_has_its_builder():
    """mypy holds the two classes to the Builder Protocol (choose_builder returns them
    as one); here, that they are the builders of every mode but auto."""
    modes = (buildwheel.OverlayBuilder.mode, buildwheel.ContainerBuilder.mode)
    assert modes == kinds.BUILDER_MODES
    assert ("auto", *kinds.BUILDER_MODES) == kinds.BUILD_MODES
