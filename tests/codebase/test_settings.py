"""Every ``FORKPATCH_*`` setting is read through :mod:`forkpatch.settings` alone, and the
README's table of settings lists exactly the ones the code reads.

A read is any bare ``FORKPATCH_NAME`` string in the code (an ``os.environ`` key, a
constant later handed to one, click's ``envvar=``): outside settings.py only the
setting readers' first argument, click's ``envvar=`` and a dict key (a variable
forkpatch *sets* for a container or a child) may hold one. Messages that mention a
variable inside longer text are not reads.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import forkpatch
from forkpatch import settings

pytestmark = pytest.mark.quick

SRC = Path(forkpatch.__file__).resolve().parent
README = SRC.parent.parent / "README.md"
NAME = re.compile(r"FORKPATCH_[A-Z0-9_]+")
READERS = {"duration", "size", "count", "flag", "flag_or_false", "url", "text"}
WRITTEN = {"FORKPATCH_COMPILE_ONLY"}  # set for the build script in the container, never read


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _names_in_code() -> tuple[dict[str, list[str]], list[str]]:
    """Every setting name the code reads -> where; and the reads that bypass settings."""
    found: dict[str, list[str]] = {}
    bypass: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _docstrings(tree)
        allowed: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                owner = getattr(func, "value", None)
                if called in READERS and getattr(owner, "id", None) == "settings" and node.args:
                    allowed.add(id(node.args[0]))
                for kw in node.keywords:
                    if kw.arg == "envvar":
                        allowed.add(id(kw.value))
            elif isinstance(node, ast.Dict):
                allowed.update(id(k) for k in node.keys if k is not None)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                # NAME = "FORKPATCH_X": a constant; its uses are checked where it is read
                allowed.add(id(node.value))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            if id(node) in skip or not NAME.fullmatch(node.value):
                continue
            if node.value in WRITTEN:
                continue
            found.setdefault(node.value, []).append(f"{rel}:{node.lineno}")
            if rel != "settings.py" and id(node) not in allowed:
                bypass.append(f"{rel}:{node.lineno}: {node.value}")
        text = path.read_text(encoding="utf-8")
        if rel != "settings.py":
            for m in re.finditer(
                r"(?:environ\.get|getenv|environ\[)\(?\s*([A-Z_]*ENV[A-Z_]*)", text
            ):
                line = text.count("\n", 0, m.start()) + 1
                bypass.append(f"{rel}:{line}: os.environ read of {m.group(1)}")
    return found, bypass


def _readme_names() -> list[str]:
    section = README.read_text(encoding="utf-8").split("\n## Settings\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    return [m.group(1) for m in re.finditer(r"^\| `(FORKPATCH_[A-Z0-9_]+)` \|", section, re.M)]


def test_no_forkpatch_setting_is_read_outside_settings():
    _found, bypass = _names_in_code()
    assert bypass == [], "read these through forkpatch.settings (and give each a row there)"


def test_every_setting_the_code_reads_is_in_settings_and_the_readme():
    found, _bypass = _names_in_code()
    read = {n for n, where in found.items() if any(not w.startswith("settings.py:") for w in where)}
    assert sorted(read) == sorted(settings.SETTINGS), "settings.SETTINGS and the code differ"
    assert _readme_names() == list(settings.SETTINGS), "README's ## Settings table differs"


def test_the_checker_sees_a_bypass(tmp_path, monkeypatch):
    """The AST check itself: a direct read, a constant handed to os.environ, and the
    allowed forms, on a module written here."""
    mod = tmp_path / "forkpatch"
    mod.mkdir()
    (mod / "bad.py").write_text(
        'import os\nfrom forkpatch import settings\nKEEP_ENV = "FORKPATCH_KEEP"\n'
        'a = os.environ.get("FORKPATCH_DIRECT")\nb = os.environ.get(KEEP_ENV)\n'
        'c = settings.text("FORKPATCH_OK")\nd = {"FORKPATCH_SET": "1"}\n'
        'e = f"raise FORKPATCH_OK if needed"\n',
        encoding="utf-8",
    )
    monkeypatch.setitem(globals(), "SRC", mod)
    found, bypass = _names_in_code()
    assert sorted(found) == ["FORKPATCH_DIRECT", "FORKPATCH_KEEP", "FORKPATCH_OK", "FORKPATCH_SET"]
    assert bypass == ["bad.py:4: FORKPATCH_DIRECT", "bad.py:5: os.environ read of KEEP_ENV"]
