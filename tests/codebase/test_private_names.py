"""The tests use forkpatch through its public names only.

A test that imports or reaches a private name (``_name``) of forkpatch pins how a
module is written instead of what it does, and breaks when the module is split or
its helper inlined. Every form counts: ``from forkpatch.x import _a`` (also inside
parentheses, with ``as``, in a function), a private module (``forkpatch.x._m``),
``module._name`` and ``Class._name`` on anything imported from forkpatch, and the
same through strings (``setattr(module, "_name", ...)``, ``monkeypatch.setattr(
"forkpatch.x._name", ...)``). Test the helper through its public caller, or make it
public where it is a unit with its own contract.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The tests and the fuzz harnesses (which are run by the tests); the benchmarks time
# private parts on purpose and are not tests.
SOURCES = sorted([*ROOT.joinpath("tests").rglob("*.py"), *ROOT.joinpath("fuzz").glob("*.py")])
# Calls that reach an attribute by its name as a string: (object, "name", ...).
_BY_NAME = {"setattr", "getattr", "delattr", "hasattr", "object"}
_DOTTED_PRIVATE = re.compile(r"\Aforkpatch(?:\.\w+)*\._(?!_)\w*")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _root_and_attrs(node: ast.expr) -> tuple[str, list[str]] | None:
    """``a.b.c`` -> ("a", ["b", "c"]); None when the chain does not start at a name."""
    attrs: list[str] = []
    while isinstance(node, ast.Attribute):
        attrs.insert(0, node.attr)
        node = node.value
    return (node.id, attrs) if isinstance(node, ast.Name) else None


def private_uses(source: str) -> list[str]:
    """Each private name of forkpatch that ``source`` imports or reaches, with its line."""
    tree = ast.parse(source)
    found: list[str] = []
    bound: set[str] = set()  # names bound to forkpatch's modules or to what they hold
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] != "forkpatch":
                    continue
                if any(_private(p) for p in parts):
                    found.append(f"{node.lineno}: import {alias.name}")
                bound.add(alias.asname or "forkpatch")
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            parts = node.module.split(".")
            if parts[0] != "forkpatch":
                continue
            if any(_private(p) for p in parts):
                found.append(f"{node.lineno}: from {node.module} import ...")
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"{node.lineno}: from {node.module} import {alias.name}")
                bound.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            chain = _root_and_attrs(node)
            if chain is not None and chain[0] in bound:
                found.append(f"{node.lineno}: {'.'.join([chain[0], *chain[1]])}")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            args = node.args
            if name in _BY_NAME and len(args) >= 2:
                target, attr = _root_and_attrs(args[0]), args[1]
                if (
                    target is not None
                    and target[0] in bound
                    and isinstance(attr, ast.Constant)
                    and isinstance(attr.value, str)
                    and _private(attr.value)
                ):
                    found.append(f"{node.lineno}: {name}({ast.unparse(args[0])}, {attr.value!r})")
            first = args[0] if args else None
            if (
                isinstance(first, ast.Constant)
                and isinstance(first.value, str)
                and _DOTTED_PRIVATE.match(first.value)
            ):
                found.append(f"{node.lineno}: {name}({first.value!r})")
    return sorted(set(found), key=lambda f: (int(f.split(":", 1)[0]), f))


def test_no_test_uses_a_private_name_of_forkpatch():
    found = [
        f"{path.relative_to(ROOT)}:{use}"
        for path in SOURCES
        for use in private_uses(path.read_text(encoding="utf-8"))
    ]
    assert found == [], "test through the public caller, or make the helper public"


@pytest.mark.parametrize(
    ("source", "found"),
    [
        (
            "from forkpatch.series import _scalar_yaml",
            ["1: from forkpatch.series import _scalar_yaml"],
        ),
        (
            "from forkpatch.track import (\n    MAX_BODY,\n    _bounded as b,\n)",
            ["1: from forkpatch.track import _bounded"],
        ),
        ("def t():\n    from forkpatch import _x", ["2: from forkpatch import _x"]),
        ("from forkpatch.smoke._impl import run", ["1: from forkpatch.smoke._impl import ..."]),
        ("import forkpatch._impl as m", ["1: import forkpatch._impl"]),
        (
            "from forkpatch.smoke import incheck\nincheck._reference_ops()",
            ["2: incheck._reference_ops"],
        ),
        (
            "import forkpatch.smoke.incheck\nforkpatch.smoke.incheck._x",
            ["2: forkpatch.smoke.incheck._x"],
        ),
        ("import forkpatch.fsutil as fs\nfs._LOCK = 1", ["2: fs._LOCK"]),
        ("from forkpatch.stack import Stack\nStack._unsaved", ["2: Stack._unsaved"]),
        (
            "from forkpatch import fsutil\nmonkeypatch.setattr(fsutil, '_LOCK_SETTLE_S', 0.5)",
            ["2: setattr(fsutil, '_LOCK_SETTLE_S')"],
        ),
        (
            "monkeypatch.setattr('forkpatch.smoke.incheck._torch', f)",
            ["1: setattr('forkpatch.smoke.incheck._torch')"],
        ),
        # Not private, or not forkpatch's.
        ("from forkpatch.series import dump_series\nimport forkpatch\nforkpatch.__file__", []),
        ("from support.git import _helper\nimport torch\ntorch.ops._C", []),
        ("def f(self):\n    return self._x", []),
        (
            "from forkpatch.smoke import incheck\nmonkeypatch.setattr(incheck, 'import_torch', f)",
            [],
        ),
    ],
)
def test_the_check_sees_every_form_of_a_private_use(source, found):
    assert private_uses(source) == found
