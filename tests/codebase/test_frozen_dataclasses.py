"""A dataclass is frozen unless it is an honest builder or handle: one whose fields are
assigned after it is made. Those are named here; the list only shrinks. A new plain
@dataclass fails until it is frozen (a copy is ``dataclasses.replace``) or, being a
builder, is named below with the reason."""

from __future__ import annotations

import ast
from pathlib import Path

import forkpatch

SRC = Path(forkpatch.__file__).resolve().parent

#: module (relative to src/forkpatch) and class -> why its fields change after it is made.
MUTABLE = {
    ("droppable.py", "_Run"): "a variant's run, its failure and notes set as they come",
    (
        "forkrepo.py",
        "ForkRepo",
    ): "a handle on the fork's repository, its source's Git set once known",
    ("git.py", "Git"): "a handle on a repository, caches filled lazily",
    ("importer.py", "Incoming"): "a patch being imported, normalised field by field",
    ("patchfile/parser.py", "_Section"): "the parser's section, filled line by line",
    ("project.py", "Project"): "a handle on a project, its series re-read after a write",
    ("rebase/classifier.py", "Walk"): "the classifier's walk, advanced step by step",
    ("rebase/state.py", "Journal"): "a handle on the rebase journal on disk",
    ("smoke/bisect.py", "BisectResult"): "the bisect's result, counters and status set as it runs",
    ("smoke/env.py", "SmokeEnv"): "a handle on a smoke environment",
    ("wheels/container.py", "BuildContainer"): "a handle on a running build container",
    ("wheels/verify.py", "VerifyReport"): "a wheel's check, findings added as they come",
    ("wheels/wheelzip.py", "RecordCheck"): "RECORD's comparison, findings added as they come",
}


def _dataclass_decorator(node: ast.ClassDef) -> ast.expr | None:
    for d in node.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if (isinstance(target, ast.Name) and target.id == "dataclass") or (
            isinstance(target, ast.Attribute) and target.attr == "dataclass"
        ):
            return d
    return None


def _is_frozen(decorator: ast.expr) -> bool:
    return isinstance(decorator, ast.Call) and any(
        k.arg == "frozen" and isinstance(k.value, ast.Constant) and k.value.value is True
        for k in decorator.keywords
    )


def plain_dataclasses(root: Path) -> set[tuple[str, str]]:
    out: set[tuple[str, str]] = set()
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                d = _dataclass_decorator(node)
                if d is not None and not _is_frozen(d):
                    out.add((path.relative_to(root).as_posix(), node.name))
    return out


def test_every_plain_dataclass_is_a_named_builder():
    new = sorted(plain_dataclasses(SRC) - MUTABLE.keys())
    assert new == [], f"freeze these (frozen=True), or name them in MUTABLE with why: {new}"


def test_the_list_of_mutable_dataclasses_only_shrinks():
    gone = sorted(MUTABLE.keys() - plain_dataclasses(SRC))
    assert gone == [], f"frozen or removed now: take them off MUTABLE: {gone}"


def test_the_walk_sees_every_spelling(tmp_path: Path):
    (tmp_path / "m.py").write_text(
        "import dataclasses\nfrom dataclasses import dataclass\n"
        "@dataclass\nclass A: pass\n"
        "@dataclass(eq=False)\nclass B: pass\n"
        "@dataclasses.dataclass\nclass C: pass\n"
        "@dataclass(frozen=False)\nclass D: pass\n"
        "@dataclass(frozen=True)\nclass E: pass\n"
        "@dataclasses.dataclass(frozen=True, slots=True)\nclass F: pass\n"
        "class G: pass\n",
        encoding="utf-8",
    )
    assert plain_dataclasses(tmp_path) == {("m.py", n) for n in "ABCD"}
