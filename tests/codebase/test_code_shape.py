"""The code keeps its shape: typed rebase state, small signatures, no pointers outside."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import forkpatch.rebase

PACKAGE = Path(forkpatch.rebase.__file__).resolve().parent


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def test_no_function_in_the_rebase_package_takes_more_than_five_parameters():
    too_many = []
    for path in sorted(PACKAGE.glob("*.py")):
        for fn in _functions(path):
            a = fn.args
            count = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
            count += bool(a.vararg) + bool(a.kwarg)
            if count > 5:
                too_many.append(f"{path.name}:{fn.lineno} {fn.name} ({count})")
    assert too_many == []


def test_the_rebase_state_is_typed_not_a_dict_of_anything():
    """Only the report, a JSON document for other programs, is a mapping of values."""
    for path in sorted(PACKAGE.glob("*.py")):
        if path.name == "report.py":
            continue
        text = path.read_text(encoding="utf-8")
        assert "Any" not in {n.id for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Name)}, (
            f"{path.name} uses typing.Any"
        )
        assert "dict[str, Any]" not in text, path.name


# What only exists outside the repository: the tracker's issue numbers and the
# documents beside the checkout. The code and its comments must stand on their own.
_OUTSIDE = re.compile(r"STYLE(?:\.md| points?\b)|FORK-NOTES|DOCKER-NOTES|\b[Ii]ssue \d+")


def test_no_code_or_comment_points_outside_the_repository():
    root = PACKAGE.parents[2]
    sources = [
        *root.joinpath("src").rglob("*.py"),
        *root.joinpath("bench").glob("*.py"),
        *(p for p in root.joinpath("ci").rglob("*") if p.suffix in {".sh", ".py", ".yml", ""}),
        *root.joinpath(".github").rglob("*.yml"),
    ]
    found = [
        f"{path.relative_to(root)}:{n}: {line.strip()[:80]}"
        for path in sources
        if path.is_file()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _OUTSIDE.search(line)
    ]
    assert found == []


def test_the_stack_state_is_frozen_data_not_a_dict_of_anything():
    """state.json is read into a frozen StackState once per command and written whole;
    nothing in the stack, the project or the rebase reads or edits it by key."""
    import dataclasses

    import forkpatch.stack
    import forkpatch.stackstate as stackstate

    src = PACKAGE.parent
    for path in [
        *sorted(Path(forkpatch.stack.__file__).parent.glob("*.py")),
        src / "stackstate.py",
    ]:
        assert "dict[str, Any]" not in path.read_text(encoding="utf-8"), path.name
    for cls in (stackstate.StackState, stackstate.Editing, stackstate.Layout):
        assert cls.__dataclass_params__.frozen, cls.__name__  # type: ignore[attr-defined]
        assert dataclasses.is_dataclass(cls)
    keyed = re.compile(r"state(?:\.get\(|\[)\"(worktree|base|editing|layout|merge_bases|synced)\"")
    for path in [src / "project.py", src / "ops.py", src / "importer.py", *PACKAGE.glob("*.py")]:
        assert not keyed.search(path.read_text(encoding="utf-8")), path.name
