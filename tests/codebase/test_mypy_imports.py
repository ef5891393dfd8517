"""mypy's verdict does not depend on what else the checking venv happens to hold.

CI type-checks in a venv with only forkpatch's runtime dependencies and the lint
extra. A module of forkpatch that imports anything else (pytest inside the team
check server, torch inside a smoke check) type-checks here, where the test extra is
installed, and fails there. So every third-party module imported anywhere under
``src/`` is either a runtime dependency of forkpatch or listed in pyproject's mypy
override that ignores missing imports.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

from packaging.requirements import Requirement

import forkpatch

SRC = Path(forkpatch.__file__).resolve().parent
PYPROJECT = SRC.parent.parent / "pyproject.toml"


def _imported_top_levels() -> dict[str, str]:
    """Top-level module name -> one file that imports it (absolute imports only)."""
    found: dict[str, str] = {}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name.partition(".")[0], str(path.relative_to(SRC)))
    return found


# Distributions whose import name is not their project name.
_IMPORT_NAME = {"pyyaml": "yaml"}


def _runtime_modules() -> set[str]:
    """Import names provided by forkpatch's runtime (not extra) requirements."""
    mods = set()
    for line in importlib.metadata.requires("forkpatch") or []:
        req = Requirement(line)
        if req.marker is not None and "extra" in str(req.marker):
            continue
        name = req.name.lower().replace("-", "_")
        mods.add(_IMPORT_NAME.get(name, name))
    return mods


def _mypy_ignored() -> set[str]:
    text = PYPROJECT.read_text(encoding="utf-8")
    ignored: set[str] = set()
    for block in re.findall(r"\[\[tool\.mypy\.overrides\]\]\n(.*?)(?=\n\[|\Z)", text, re.S):
        if "ignore_missing_imports = true" not in block:
            continue
        listed = re.search(r"module\s*=\s*\[(.*?)\]", block, re.S)
        assert listed, block
        ignored |= {m.split(".")[0] for m in re.findall(r'"([^"]+)"', listed.group(1))}
    return ignored


def test_every_third_party_import_is_a_dependency_or_ignored_by_mypy() -> None:
    runtime = _runtime_modules()
    ignored = _mypy_ignored()
    assert {"click", "yaml", "pygit2"} <= runtime  # the mapping itself works
    stray = {
        mod: where
        for mod, where in _imported_top_levels().items()
        if mod not in sys.stdlib_module_names
        and mod not in {"forkpatch", "__future__", "pip"}  # pip: in every venv
        and mod not in runtime
        and mod not in ignored
    }
    assert not stray, (
        "imported under src/ but neither a runtime dependency nor in the mypy override "
        f"with ignore_missing_imports (CI's lint venv lacks them): {stray}"
    )


def test_the_check_sees_a_stray_import() -> None:
    # The override list is read from the real file; a module missing from it is caught.
    ignored = _mypy_ignored()
    assert "pytest" in ignored and "torch" in ignored
    assert "hypothesis" not in ignored
