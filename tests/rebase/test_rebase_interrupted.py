"""A rebase killed (SIGKILL) in the middle of writing is recovered by --continue or --abort.

The process is stopped at a named point by the documented test hook
FORKPATCH_TEST_PAUSE_AFTER (it SIGSTOPs itself there), then SIGKILLed.
"""

from __future__ import annotations

import json
import shutil

import pytest

from support.procs import killed_at
from support.projects import snapshot


@pytest.fixture
def reference(example_project, tmp_path):
    """The bytes of series.yaml and patches/ after an uninterrupted rebase to v1.3.0."""
    project, run = example_project
    copy = tmp_path / "reference"
    shutil.copytree(project, copy, ignore=shutil.ignore_patterns(".forkpatch"))
    before = snapshot(project)
    run("rebase", "--onto", "v1.3.0")
    after = snapshot(project)
    # Put the project back as it was for the test itself.
    shutil.rmtree(project)
    shutil.copytree(copy, project)
    assert snapshot(project) == before
    return before, after


@pytest.mark.parametrize("point", ["journal", "files", "report"])
@pytest.mark.parametrize("how", ["--continue", "--abort"])
def test_killed_rebase_recovers(example_project, reference, point, how):
    project, run = example_project
    before, after = reference
    killed_at(project, point, "rebase", "--onto", "v1.3.0")
    assert (project / ".forkpatch" / "rebase" / "state.json").exists()
    # Patch files and series.yaml are written as one unit: all old, or all new.
    assert snapshot(project) == (before if point == "journal" else after)
    # The next command says how to go on; mutating commands refuse.
    _, _, err = run("status")
    assert "a rebase onto v1.3.0 was interrupted" in err
    assert "forkpatch rebase --continue" in err and "forkpatch rebase --abort" in err
    _, _, err = run("apply", expect=1)
    assert "refused while a rebase onto v1.3.0 is in progress" in err
    run("rebase", how)
    assert snapshot(project) == (after if how == "--continue" else before)
    assert not (project / ".forkpatch" / "rebase").exists()
    _, _, err = run("status")
    assert "in progress" not in err and "interrupted" not in err


def test_killed_at_a_conflict_can_be_aborted(example_project):
    project, run = example_project
    before = snapshot(project)
    killed_at(project, "journal", "rebase", "--onto", "v1.3.0", "--no-3way")
    _, _, err = run("status")
    assert "stopped at patch 'odd-width-padding'" in err
    run("rebase", "--abort")
    assert snapshot(project) == before


def test_killed_before_the_conflict_work_tree_is_written(example_project):
    """Killed once the journal says it stopped, before the work tree holds the stop:
    --continue writes the work tree (and stops there), then --skip goes on."""
    project, run = example_project
    killed_at(project, "journal", "rebase", "--onto", "v1.3.0", "--no-3way")
    _, _, err = run("status")
    assert "its work tree was not written yet" in err
    _, _, err = run("rebase", "--continue", expect=3)
    wt = project / ".forkpatch" / "rebase-worktree"
    assert "patch 'odd-width-padding' does not apply" in err and str(wt) in err
    # --no-3way stopped it; the work tree brings it in with a 3-way merge, which is clean.
    (fp8,) = [p for p in wt.rglob("fp8.py") if "online" in str(p)]
    assert b"pad = (-layer.true_n) % self.block" in fp8.read_bytes()
    _, _, err = run("status")
    assert "stopped at patch 'odd-width-padding' with conflicts in" in err
    _, out, _ = run("rebase", "--continue", "--json")
    rep = json.loads(out)
    assert [d["name"] for d in rep["dropped"]] == ["cli-version"]
    assert {p["name"]: p["status"] for p in rep["patches"]}["odd-width-padding"] == "resolved"
