"""The code keeps its shape: typed rebase state, small signatures, no pointers outside."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

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
    """The report too: typed data, turned to JSON for other programs by to_json()."""
    for path in sorted(PACKAGE.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert "Any" not in {n.id for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Name)}, (
            f"{path.name} uses typing.Any"
        )
        assert "dict[str, Any]" not in text, path.name


# The typed smoke report from the writer to publish (and the tracker's stage results):
# no Any at all; dict[str, Any] only in the JSON writers and readers of smoke/ and publish.
TYPED = ("smoke/report.py", "smoke/runner.py", "publish.py", "track/stages.py")
JSON_EDGES = {"to_json", "from_json", "junit_xml"}


def _names_any(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "Any" for n in ast.walk(node))


@pytest.mark.parametrize("rel", TYPED)
def test_the_smoke_report_and_publish_use_no_any(rel):
    text = (PACKAGE.parent / rel).read_text(encoding="utf-8")
    assert not _names_any(ast.parse(text)), f"{rel} uses typing.Any"
    assert "dict[str, Any]" not in text, rel


def _any_outside_json_edges(path: Path) -> list[int]:
    """Lines where dict[str, Any] is written outside a to_json/from_json/junit_xml."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    inside: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name in JSON_EDGES:
            inside.update(range(fn.lineno, (fn.end_lineno or fn.lineno) + 1))
    lines = path.read_text(encoding="utf-8").splitlines()
    return [n for n, line in enumerate(lines, 1) if "dict[str, Any]" in line and n not in inside]


# The team check server's answer (its imports and timings), read by the session as it came
# in: the one place left, to be typed as the check records are (kinds.JsonObject).
STILL_ANY = {"smoke/session.py": [73, 173]}


def test_smoke_and_publish_keep_dict_of_any_to_their_json_edges():
    src = PACKAGE.parent
    found = {
        str(p.relative_to(src)): lines
        for p in [*sorted((src / "smoke").glob("*.py")), src / "publish.py"]
        if (lines := _any_outside_json_edges(p))
    }
    assert found == STILL_ANY


def test_the_json_edge_check_sees_a_field(tmp_path):
    (tmp_path / "m.py").write_text(
        "class R:\n"
        "    data: dict[str, Any]\n"
        "    def to_json(self) -> dict[str, Any]:\n"
        "        out: dict[str, Any] = {}\n"
        "        return out\n",
        encoding="utf-8",
    )
    assert _any_outside_json_edges(tmp_path / "m.py") == [2]


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
        *root.joinpath(".ci").rglob("*"),
        *root.joinpath("docs").rglob("*.md"),
        *root.joinpath("bench").glob("*.md"),
        root / "README.md",
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


# series.yaml's key names (HTTP and mail headers, also read with .get, are capitalised).
_KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)+$")


def _section_reads(root: Path) -> list[str]:
    """Calls that read a series.yaml section by its key names (``x.section("track")``,
    ``cfg.get("min-age-days")``) instead of the typed section's attributes."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            first = node.args[0] if node.args else None
            key = first.value if isinstance(first, ast.Constant) else None
            by_section = node.func.attr == "section" and isinstance(key, str)
            by_kebab_key = node.func.attr == "get" and isinstance(key, str) and _KEBAB.match(key)
            if by_section or by_kebab_key:
                found.append(f"{path.relative_to(root).as_posix()}:{node.lineno}")
    return sorted(found, key=lambda at: (at.split(":")[0], int(at.split(":")[1])))


def test_series_sections_are_read_through_their_typed_attributes():
    assert _section_reads(PACKAGE.parent) == []


def test_the_section_check_sees_both_forms(tmp_path):
    (tmp_path / "a.py").write_text(
        'x = series.section("track").get("pattern")\n'
        'y = cfg.get("min-age-days", 0)\n'
        'z = cfg.get("pattern")\n'
        'h = headers.get("Content-Length")\n',
        encoding="utf-8",
    )
    assert _section_reads(tmp_path) == ["a.py:1", "a.py:2"]


def test_no_source_module_is_over_a_thousand_lines():
    """Modules are split by job, none over 1,000 lines (the stack, track, patchfile and
    the smoke suite each became a package for it)."""
    src = PACKAGE.parent
    sizes = {
        str(p.relative_to(src)): len(p.read_text(encoding="utf-8").splitlines())
        for p in sorted(src.rglob("*.py"))
    }
    assert len(sizes) > 50
    assert {name: n for name, n in sizes.items() if n > 1000} == {}


def test_the_rebase_state_holds_its_plan_options_and_memo_not_copies_of_their_fields():
    """The journal's state keeps the Plan, the RebaseOptions and the ClassifierMemo as
    they are; none of their fields (nor the plan's derived names) is a field of its own,
    and changing it needs no type: ignore."""
    import dataclasses

    from forkpatch.rebase.plan import ClassifierMemo, Plan, RebaseOptions, Setup
    from forkpatch.rebase.state import RebaseState

    own = {f.name for f in dataclasses.fields(RebaseState)}
    assert {"plan", "options", "memo"} <= own
    theirs = {
        f.name
        for cls in (Plan, RebaseOptions, ClassifierMemo, Setup)
        for f in dataclasses.fields(cls)
    }
    theirs |= {n for n, v in vars(Plan).items() if isinstance(v, property)}
    assert own & theirs == set()
    text = (PACKAGE / "state.py").read_text(encoding="utf-8")
    assert "type: ignore" not in text
