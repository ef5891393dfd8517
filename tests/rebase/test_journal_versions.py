"""A rebase journal written by the previous forkpatch (version 2: the plan's, the
options' and the classifier's fields copied flat into the state) is still read: a rebase
stopped or interrupted by it goes on with ``--continue``, ``--skip`` and ``--abort``
exactly as one stopped by this forkpatch, and a garbled one is refused naming the file.

The version-2 journals under ``fixtures/`` were written by that forkpatch for the very
scenarios built here (commit ids are reproducible: the scratch fork's dates are fixed
and the rebase's commits take the target's date). Only their seal on ``original.json``
is made again, since that file holds the scratch fork's path.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from forkpatch.fsutil import dump_state, parse_state
from support.git import replace_once
from support.procs import killed_at
from support.projects import LINES, snapshot

FIXTURES = Path(__file__).parent / "fixtures"
BASE_FILES = {
    "a.py": LINES,
    "b.py": LINES.replace("line", "bee"),
    "pkg/mod.py": LINES,
    "c.py": LINES.replace("line", "sea"),
}


def _stopped_twice(scenario):
    """p0 clean, p1 conflicts (upstream changed its line), p2 touches the same file
    (forecast: depends on p1) and conflicts too once p1 is resolved, p3 follows a file
    upstream moved, p4 is upstream already (patch-id)."""

    def upstream(fork):
        fork.add_file("a.py", replace_once(LINES, "line 9\n", "line 9 upstream\n"))
        fork.add_file("a.py", replace_once(fork.read("a.py").decode(), "line 30\n", "line 30 up\n"))
        fork.git("mv", "pkg/mod.py", "pkg/moved.py")
        fork.commit("Upstream edits a.py and moves pkg/mod.py")
        fork.add_file("c.py", replace_once(BASE_FILES["c.py"], "sea 5\n", "sea 5 p4\n"))
        fork.commit("Upstream takes p4")
        fork.tag("v2")

    s = scenario(
        BASE_FILES,
        [
            ("p0", {"b.py": "bee 0\n" + BASE_FILES["b.py"]}),
            ("p1", {"a.py": replace_once(LINES, "line 9\n", "line 9 ours\n")}),
            (
                "p2",
                {
                    "a.py": replace_once(
                        replace_once(LINES, "line 9\n", "line 9 ours\n"),
                        "line 30\n",
                        "line 30 p2\n",
                    )
                },
            ),
            ("p3", {"pkg/mod.py": replace_once(LINES, "line 20\n", "line 20 p3\n")}),
            ("p4", {"c.py": replace_once(BASE_FILES["c.py"], "sea 5\n", "sea 5 p4\n")}),
        ],
        upstream,
    )
    s.run("rebase", "--onto", "v2", expect=3)
    return s


def _journal_dir(project: Path) -> Path:
    return project / ".forkpatch" / "rebase"


def _state_file(project: Path) -> Path:
    return _journal_dir(project) / "state.json"


def _version(project: Path) -> int:
    return json.loads(_state_file(project).read_text(encoding="utf-8"))["version"]


def _put_old_journal(project: Path, fixture: str, edit=None) -> None:
    """Replace the journal's state.json with the version-2 one of ``fixture``, sealed
    against this project's original.json (``edit``: change its data first)."""
    raw = (FIXTURES / fixture).read_bytes()
    data = parse_state(raw, path=FIXTURES / fixture, kind="rebase", version=2)
    bundle = (_journal_dir(project) / "original.json").read_bytes()
    data["original_sha256"] = hashlib.sha256(bundle).hexdigest()
    if edit is not None:
        edit(data)
    _state_file(project).write_bytes(dump_state("rebase", 2, data))


def _resolve(s) -> None:
    """Resolve the conflict work tree's a.py: upstream's line 9 and ours, both kept."""
    wt = s.project / ".forkpatch" / "rebase-worktree"
    text = (wt / "a.py").read_text(encoding="utf-8")
    start, end = text.index("<<<<<<<"), text.index(">>>>>>>")
    end = text.index("\n", end) + 1
    (wt / "a.py").write_text(
        text[:start] + "line 9 upstream\nline 9 ours\n" + text[end:], encoding="utf-8"
    )


def _finish(s, how: str) -> tuple[int, dict[str, bytes], str]:
    """``how`` on the stopped rebase, then whatever it takes to end it (the conflict of
    p2 after p1's: skipped); the exit status of ``how``, the project's files, its output."""
    if how == "--continue":
        _resolve(s)
    code, out, _err = s.run("rebase", how, "--json", expect=None)
    while code == 3:
        code, out, _err = s.run("rebase", "--skip", "--json", expect=None)
    return code, snapshot(s.project), out


@pytest.fixture
def stopped(scenario, tmp_path):
    """The stopped rebase (a journal of this forkpatch) and a pristine copy of it."""
    s = _stopped_twice(scenario)
    assert _version(s.project) == 3
    pristine = tmp_path / "pristine"
    shutil.copytree(s.project, pristine, symlinks=True)

    def reset() -> None:
        shutil.rmtree(s.project)
        shutil.copytree(pristine, s.project, symlinks=True)

    return s, reset


@pytest.mark.parametrize("how", ["--continue", "--skip", "--abort"])
def test_a_stop_of_the_previous_version_goes_on_as_one_of_this_version(stopped, how):
    s, reset = stopped
    before = snapshot(s.project)
    status, _out, _err = s.run("rebase", "--continue", "--json", expect=None)
    assert status == 3  # markers remain: nothing resolved yet
    reset()
    expected = _finish(s, how)
    reset()
    _put_old_journal(s.project, "stopped-v2.json")
    assert _version(s.project) == 2
    # What a stopped rebase tells the user reads the old journal too.
    _, _, err = s.run("status")
    assert "stopped at patch 'p1'" in err, err
    _, _, err = s.run("apply", expect=1)
    assert "refused while a rebase onto v2 is in progress" in err, err
    got = _finish(s, how)
    assert got == expected
    assert got[0] == 0
    assert not _journal_dir(s.project).exists()
    if how == "--abort":
        assert got[1] == before
    else:
        assert got[1] != before
        names = [p["name"] for p in json.loads(got[2])["patches"]]
        assert names == ["p0", "p1", "p2", "p3", "p4"]


def test_a_step_after_an_old_journal_writes_this_version(stopped):
    """--continue stops again at p2: the journal it writes is version 3, and the
    classifier's memo of the old journal (patch-id matches, renames, merge bases) went
    into it unchanged."""
    s, _reset = stopped
    _put_old_journal(s.project, "stopped-v2.json")
    old = parse_state(
        (FIXTURES / "stopped-v2.json").read_bytes(),
        path=FIXTURES / "stopped-v2.json",
        kind="rebase",
        version=2,
    )
    _resolve(s)
    s.run("rebase", "--continue", expect=3)
    assert _version(s.project) == 3
    data = json.loads(_state_file(s.project).read_text(encoding="utf-8"))["data"]
    assert data["conflict"] == "p2" and data["phase"] == "conflict"
    for key in ("upstream", "renames", "images", "date"):
        assert data["memo"][key] == old[key], key
    assert data["options"] == {"onto": "v2", "three_way": True, "fuzz": 0}
    assert data["plan"]["target"] == {
        "name": "v2",
        "commit": old["onto_commit"],
        "resolved": "",
        "tag": "v2",
        "branch": "",
    }
    assert data["plan"]["base"] == {"tag": "v1", "commit": old["base_commit"], "branch": ""}
    assert [o["status"] for o in data["plan"]["outcomes"]] == [
        "clean",
        "resolved",
        "conflict",
        "clean",
        "upstreamed",
    ]


def _garbled_cases():
    """(label, edit of a version-2 journal's data, text the refusal names)."""

    def set_(key, value):
        return lambda d: d.update({key: value})

    def outcome(edit):
        return lambda d: edit(d["outcomes"][1])

    return [
        (
            "status",
            outcome(lambda o: o.update(status="exploded")),
            "'status' is 'exploded', not one of",
        ),
        ("relation", set_("relation", "sideways"), "'relation' is 'sideways', not one of"),
        ("phase", set_("phase", "paused"), "'phase' is 'paused', not one of"),
        ("head", set_("head", "HEAD~1"), "is not a commit id"),
        ("fuzz", set_("fuzz", 9), "out of range"),
        ("three_way", set_("three_way", "yes"), "must be true or false"),
        ("date", set_("date", "yesterday"), "is not a commit date"),
        ("renames", set_("renames", [["../../etc/passwd", "x"]]), "not a plain relative path"),
        ("images", set_("images", [["p1", "a.py", "HEAD", None]]), "is not an object id"),
        ("upstream", set_("upstream", [["p4", "nope", "s"]]), "is not a commit id"),
        ("missing", lambda d: d.pop("onto_commit"), "'onto_commit' is missing"),
        ("conflict", set_("conflict", "p0"), "is not a conflicting patch"),
        ("not the first", set_("conflict", "p2"), "does not follow from its patches"),
        ("writing", set_("phase", "writing"), "does not follow from its patches"),
        (
            "a path",
            outcome(lambda o: o["conflicts"][0].update(path="../outside")),
            "not a plain relative path",
        ),
    ]


@pytest.mark.parametrize("how", ["--continue", "--skip", "--abort"])
def test_a_garbled_journal_of_the_previous_version_is_refused(stopped, how):
    s, reset = stopped
    for label, edit, needle in _garbled_cases():
        reset()
        _put_old_journal(s.project, "stopped-v2.json", edit)
        before = snapshot(s.project)
        code, _out, err = s.run("rebase", how, expect=None)
        assert code not in (0, 3), f"{label}: {how} accepted it\n{err}"
        assert needle in err, f"{label}: {err}"
        assert ".forkpatch/rebase/state.json" in err, f"{label}: the file is not named: {err}"
        assert snapshot(s.project) == before, label


def test_a_long_detail_line_of_git_s_is_read_back(stopped):
    """An outcome's detail is git's own message, kept whole: a line longer than a plain
    value (a name, an id) still reads back."""
    s, reset = stopped
    reset()
    long_line = "error: patch failed: " + "x" * 10_000
    _put_old_journal(
        s.project, "stopped-v2.json", lambda d: d["outcomes"][1].update(detail=[long_line])
    )
    code, _out, err = s.run("rebase", "--abort", expect=None)
    assert code == 0, err


def test_an_interrupted_finish_of_the_previous_version_is_finished(example_project, tmp_path):
    """Killed once its journal was written (phase writing): --continue finishes it from
    a version-2 journal as from one of this version, and --abort restores everything."""
    project, run = example_project
    before = snapshot(project)
    _killed_at_journal(project)
    assert _version(project) == 3
    pristine = tmp_path / "pristine"
    shutil.copytree(project, pristine, symlinks=True)
    run("rebase", "--continue")
    expected = snapshot(project)
    assert expected != before
    for how, after in (("--continue", expected), ("--abort", before)):
        shutil.rmtree(project)
        shutil.copytree(pristine, project, symlinks=True)
        _put_old_journal(project, "writing-v2.json")
        _, _, err = run("status")
        assert "was interrupted while writing" in err, err
        run("rebase", how)
        assert snapshot(project) == after, how
        assert not _journal_dir(project).exists()


def _killed_at_journal(project: Path) -> None:
    """``rebase --onto v1.3.0`` SIGKILLed once its journal is written (the test hook)."""
    killed_at(project, "journal", "rebase", "--onto", "v1.3.0")


def test_a_journal_read_and_written_again_is_the_same_state(stopped):
    """Nothing is lost between the versions: a version-2 journal read, written (version
    3) and read again is the state it was; a version-3 journal read and written again is
    byte for byte the same file."""
    from forkpatch.project import Project
    from forkpatch.rebase.state import Journal

    s, _reset = stopped
    journal = Journal(Project(s.project))
    raw = _state_file(s.project).read_bytes()
    state = journal.load()
    journal.save(state)
    assert _state_file(s.project).read_bytes() == raw
    _put_old_journal(s.project, "stopped-v2.json")
    old = Journal(Project(s.project)).load()
    assert old.plan.outcomes == state.plan.outcomes
    assert (old.plan.onto, old.plan.onto_commit, old.plan.base, old.plan.base_commit) == (
        state.plan.onto,
        state.plan.onto_commit,
        state.plan.base,
        state.plan.base_commit,
    )
    assert old.memo == state.memo and old.options == state.options
    assert (old.phase, old.conflict, old.stack) == (state.phase, state.conflict, state.stack)
    journal = Journal(Project(s.project))
    journal.save(old)
    assert _version(s.project) == 3
    assert journal.load() == old


@pytest.mark.parametrize("how", ["--continue", "--skip"])
def test_a_version_2_journal_from_before_the_target_record_was_kept(stopped, how):
    """The first version-2 journals had no onto_tag / onto_branch: their target's name
    was recorded as its tag; series.yaml records it so."""
    s, reset = stopped
    expected = _finish(s, how)
    reset()

    def older(data):
        del data["onto_tag"], data["onto_branch"]

    _put_old_journal(s.project, "stopped-v2.json", older)
    assert _finish(s, how) == expected
    assert "tag: v2" in (s.project / "series.yaml").read_text(encoding="utf-8")
