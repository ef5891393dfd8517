"""One shape for a file that does not apply: the engine's FileConflict is what a rebase
outcome holds (its journal, its report, ``check --json``) and what track's forecast
keeps, frozen; the merged file with markers stays out of every file."""

from __future__ import annotations

import dataclasses

import pytest

from forkpatch.project import Project
from forkpatch.rebase import RebaseOptions, check
from forkpatch.results import FileConflict
from forkpatch.track import ConflictEntry
from support.projects import one_line_conflict


@pytest.mark.parametrize(
    "conflict",
    [
        FileConflict("a.py", "hunk 1 of a.py does not apply at line 6: context", (1,), 6),
        FileConflict("pkg/b.py", "pkg/b.py does not exist in the tree"),
        FileConflict("c.py", "3 conflicting region(s)", (1, 2, 5), None, merged=b"<<<<<<<\n"),
    ],
)
def test_a_file_conflict_reads_back_as_it_was_written(conflict):
    data = conflict.to_json()
    assert list(data) == ["path", "reason", "hunks", "line"]  # the documented order
    assert "merged" not in data
    again = FileConflict.from_json(data)
    assert again == conflict and again.merged is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        conflict.reason = "changed"  # type: ignore[misc]


@pytest.mark.parametrize(
    "raw",
    [
        {"path": 3, "reason": "r", "hunks": [], "line": None},
        {"path": "a", "hunks": [], "line": None},
        {"path": "a", "reason": "r", "hunks": [True], "line": None},
        {"path": "a", "reason": "r", "hunks": "12", "line": None},
        {"path": "a", "reason": "r", "hunks": [1], "line": "6"},
    ],
)
def test_a_garbled_file_conflict_is_refused(raw):
    with pytest.raises(ValueError, match="conflicts"):
        FileConflict.from_json(raw)


def test_the_engine_the_plan_and_the_forecast_hold_the_same_conflict(scenario):
    s = one_line_conflict(scenario)
    plan = check(Project(s.project), RebaseOptions("v2"))
    (outcome,) = plan.outcomes
    assert outcome.status == "conflict"
    (conflict,) = outcome.conflicts
    assert isinstance(conflict, FileConflict) and conflict.path == "a.py"
    assert conflict.merged is None  # the markers are the conflict work tree's, not the plan's
    assert conflict.hunks == (1,) and conflict.line is not None
    entry = ConflictEntry.from_outcome(outcome)
    assert entry.conflicts == outcome.conflicts
    assert ConflictEntry.from_json(entry.to_json()) == entry
    assert s.check("v2", expect=3)["patches"][0]["conflicts"] == [conflict.to_json()]
