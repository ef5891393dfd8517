"""The stack is a set of small composed parts, not a tower of classes.

StackModel reads; the parts that write (the writer, the sync record, the commands)
hold a model instead of inheriting from it, and the face (``Stack``) composes them.
refresh computes a plan and writes it, the two apart.
"""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path

import forkpatch.stack
from forkpatch import kinds
from forkpatch.stack.sync import OutsideChange, Sync

STACK = Path(forkpatch.stack.__file__).resolve().parent
MAX_CLASS_LINES = 300
MAX_REFRESH_LINES = 60


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _classes() -> list[tuple[str, ast.ClassDef]]:
    return [
        (path.name, node)
        for path in sorted(STACK.glob("*.py"))
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.ClassDef)
    ]


def _method(cls: type, name: str) -> ast.FunctionDef:
    path = Path(typing.cast(str, inspect.getsourcefile(cls)))
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
    raise AssertionError(f"{cls.__name__}.{name} not found")


def big_classes(classes: list[tuple[str, ast.ClassDef]], most: int) -> list[str]:
    out = []
    for where, node in classes:
        lines = typing.cast(int, node.end_lineno) - node.lineno + 1
        if lines > most:
            out.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return out


def inherited(classes: list[tuple[str, ast.ClassDef]]) -> list[str]:
    """Classes of the stack that inherit from another class of the stack."""
    own = {node.name for _where, node in classes}
    out = []
    for where, node in classes:
        for base in node.bases:
            name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", None)
            if name in own:
                out.append(f"{where}:{node.lineno} {node.name}({name})")
    return out


def test_no_class_of_the_stack_is_over_300_lines():
    assert big_classes(_classes(), MAX_CLASS_LINES) == []


def test_no_class_of_the_stack_inherits_from_another():
    """Composition: a part holds the model (and the writer, the sync record) it needs."""
    assert inherited(_classes()) == []


def test_the_checks_see_what_they_look_for():
    tree = ast.parse(
        "class StackModel:\n    pass\n\n"
        "class EditLoop(StackModel):\n" + "    x = 1\n" * 301 + "\n"
        "class Other(base.StackModel):\n    pass\n"
    )
    classes = [("m.py", n) for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    assert inherited(classes) == ["m.py:4 EditLoop(StackModel)", "m.py:307 Other(StackModel)"]
    assert big_classes(classes, MAX_CLASS_LINES) == ["m.py:4 EditLoop (302 lines)"]


def test_the_model_imports_neither_the_engine_nor_the_patch_texts():
    """Not even lazily, nor under TYPE_CHECKING: what writes or renders is elsewhere."""
    imported = set()
    for node in ast.walk(_tree(STACK / "model.py")):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    heavy = ("engine", "patchtext", "applier", "patchfile", "stack.writer", "stack.mergebase")
    assert sorted(m for m in imported if m.startswith(tuple(f"forkpatch.{h}" for h in heavy))) == []


def test_refresh_is_a_plan_and_its_writing():
    from forkpatch.stack.refresh import Refresh, RefreshPlan

    fn = _method(Refresh, "refresh")
    assert typing.cast(int, fn.end_lineno) - fn.lineno + 1 < MAX_REFRESH_LINES
    assert RefreshPlan.__dataclass_params__.frozen  # type: ignore[attr-defined]
    calls = {
        n.func.attr
        for n in ast.walk(fn)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
    }
    assert {"plan", "write"} <= calls


def test_the_outside_changes_check_takes_five_parameters_at_most():
    a = _method(Sync, "check_outside_changes").args
    count = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
    assert count <= 5


def test_an_outside_change_is_typed_with_the_closed_sets():
    hints = typing.get_type_hints(OutsideChange)
    assert hints["kind"] == kinds.ChangeKind
    assert hints["side"] == kinds.ChangeSide
    assert set(kinds.CHANGE_SIDES) == {"file", "worktree", "both"}
