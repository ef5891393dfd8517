"""Each closed set of words is spelled once, in forkpatch.kinds: the command line's
choices and the loaders' checks are that tuple, not a copy of it."""

from __future__ import annotations

import ast
from pathlib import Path

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
    kinds.RELATIONS,
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
