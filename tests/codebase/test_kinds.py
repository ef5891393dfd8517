"""Each closed set of words is spelled once, in forkpatch.kinds: the command line's
choices and the loaders' checks are that tuple, not a copy of it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import forkpatch
from forkpatch import checkids, kinds
from forkpatch.smoke.incheck import TIERS as SUITE_TIERS

SRC = Path(forkpatch.__file__).resolve().parent
# The smoke suite runs inside the smoke venv, without forkpatch: it and the ids module it
# takes along (which imports nothing) keep their own tiers (held equal below).
STANDALONE = ("smoke/incheck", "checkids.py")
SETS = [
    kinds.TIERS,
    kinds.HARDWARE_TIERS,
    kinds.BUILD_MODES,
    kinds.TOOLCHAINS,
    kinds.SMOKE_DEPS,
    kinds.CHECK_OUTCOMES,
    kinds.TIER_STATUSES,
    kinds.PATCH_STATUSES,
    kinds.APPLIED_STATUSES,
    kinds.DROPPED_STATUSES,
    kinds.OUTCOME_STATUSES,
    kinds.REBASE_PHASES,
    kinds.BUILDER_MODES,
    kinds.HUNK_LINE_KINDS,
    kinds.CHECK_FAILURES,
    kinds.TEAM_CHECK_SOURCES,
    kinds.VERDICTS,
    kinds.PUBLISH_ACTIONS,
    kinds.STAGE_STATUSES,
    kinds.RUN_STATUSES,
    kinds.TRACK_STATUSES,
    kinds.RELEASE_STATUSES,
    kinds.TRACK_CHANGE_KINDS,
    kinds.REFERENCE_KINDS,
    kinds.UPSTREAM_STATES,
    kinds.RELATIONS,
    kinds.BISECT_STATUSES,
    kinds.PATCH_CHECK_STATUSES,
    kinds.SETTING_KINDS,
    kinds.CHANGE_KINDS,
    kinds.CHANGE_SIDES,
]


def test_the_suite_runs_the_tiers_forkpatch_knows() -> None:
    assert SUITE_TIERS == checkids.TIERS == kinds.TIERS
    assert kinds.TIERS[: len(kinds.HARDWARE_TIERS)] == kinds.HARDWARE_TIERS


def _literal_word_lists(path: Path) -> list[tuple[int, tuple[str, ...]]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Tuple, ast.List)) and len(node.elts) > 1:
            words = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            if len(words) == len(node.elts) and all(isinstance(w, str) for w in words):
                found.append((node.lineno, tuple(words)))
    return found


def test_no_module_spells_a_set_again() -> None:
    """A tuple or list of a set's words outside kinds.py (`click.Choice([...])`,
    `MODES = (...)`) is a second copy."""
    copies = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel == "kinds.py" or rel.startswith(STANDALONE):
            continue
        for line, words in _literal_word_lists(path):
            if words in SETS:
                copies.append(f"{rel}:{line}: {words}")
    assert copies == [], "use forkpatch.kinds"


# A dataclass field (or a dataclass's property) of one of these names holds a word of a
# closed set: it is typed by that set's Literal, never a bare str.
WORD_FIELDS = frozenset(
    {"status", "kind", "side", "tier", "mode", "phase", "relation", "verdict", "outcome", "action"}
)

# The fields of the other areas of this round that are still str on main. This list only
# shrinks: a field typed by its Literal leaves it (the test says so when one is listed
# and no longer str), and no field is added to it.
STILL_STR = frozenset(
    {
        "git.py:FileChange.mode",  # a git file mode as the fork's trees hold it (see docs)
    }
)


def _is_dataclass(node: ast.ClassDef) -> bool:
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name == "dataclass":
            return True
    return False


def _says_str(annotation: ast.expr | None) -> bool:
    """Whether an annotation is ``str``, alone or in a union, under ClassVar / Final /
    Optional or not (a string annotation is read as the expression it holds)."""
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return _says_str(ast.parse(annotation.value, mode="eval").body)
    if isinstance(annotation, ast.Name):
        return annotation.id == "str"
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return _says_str(annotation.left) or _says_str(annotation.right)
    if isinstance(annotation, ast.Subscript):
        wrapper = annotation.value
        name = wrapper.attr if isinstance(wrapper, ast.Attribute) else getattr(wrapper, "id", "")
        if name in {"ClassVar", "Final", "Optional"}:
            return _says_str(annotation.slice)
    return False


def _word_fields_typed_str(tree: ast.Module) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ClassDef) and _is_dataclass(node)):
            continue
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                name, annotation = item.target.id, item.annotation
            elif isinstance(item, ast.FunctionDef) and any(
                isinstance(d, ast.Name) and d.id in {"property", "cached_property"}
                for d in item.decorator_list
            ):
                name, annotation = item.name, item.returns
            else:
                continue
            if name in WORD_FIELDS and _says_str(annotation):
                found.append(f"{node.name}.{name}")
    return found


def _str_word_fields() -> set[str]:
    found = set()
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith(STANDALONE):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found |= {f"{rel}:{name}" for name in _word_fields_typed_str(tree)}
    return found


def test_a_field_holding_a_closed_set_s_word_is_typed_by_its_literal() -> None:
    """``Outcome.status: str  # see STATUSES`` passes the test above and lets any word
    in: the data says which set it holds, and mypy holds every writer to it."""
    found = _str_word_fields()
    assert sorted(found - STILL_STR) == [], "type these by their Literal in forkpatch.kinds"
    assert sorted(STILL_STR - found) == [], "typed now: take them off STILL_STR"


@pytest.mark.parametrize(
    ("source", "flagged"),
    [
        ("@dataclass\nclass A:\n    status: str\n", ["A.status"]),
        ("@dataclass(frozen=True)\nclass A:\n    kind: str | None = None\n", ["A.kind"]),
        ("@dataclasses.dataclass\nclass A:\n    mode: 'Optional[str]'\n", ["A.mode"]),
        ("@dataclass\nclass A:\n    status: ClassVar[str] = 'done'\n", ["A.status"]),
        ("@dataclass\nclass A:\n    @property\n    def tier(self) -> str: ...\n", ["A.tier"]),
        ("@dataclass\nclass A:\n    status: Status\n    name: str\n", []),
        ("@dataclass\nclass A:\n    status: ClassVar[Status] = 'done'\n", []),
        ("class A:\n    status: str\n", []),  # not a dataclass: not data
    ],
)
def test_the_field_check_sees_each_spelling_of_str(source: str, flagged: list[str]) -> None:
    assert _word_fields_typed_str(ast.parse(source)) == flagged


def test_word_of_gives_the_set_s_own_word_or_none() -> None:
    assert kinds.word_of("static", kinds.TIERS) == "static"
    assert kinds.word_of("Static", kinds.TIERS) is None
    assert kinds.word_of(1, kinds.TIERS) is None
    assert kinds.word_of("", kinds.TIERS) is None
