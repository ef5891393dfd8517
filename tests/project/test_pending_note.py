"""After a command, the entry says when a rebase is in progress in the project the
command ran on (``-C DIR`` included), and after a Ctrl-C what state it is in: both read
from the command's context as the command line was parsed, not from a second parse."""

from __future__ import annotations

import pytest

from forkpatch.cli import app, main
from support.projects import one_line_conflict, scenario_factory

NOTE = "note: a rebase onto v2"


@pytest.fixture
def stopped(tmp_path, capsys, monkeypatch):
    """A project whose rebase onto v2 stopped on a conflict; the cwd elsewhere."""
    s = one_line_conflict(scenario_factory(tmp_path, capsys), line=5)
    assert main(["-C", str(s.project), "rebase", "--onto", "v2"]) != 0
    capsys.readouterr()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return s.project


@pytest.mark.parametrize(
    "argv",
    [
        ["top"],  # a plain form, without click
        ["-q", "status", "--json"],
        ["export"],  # through click
        ["push"],  # a command that refuses during a rebase: the note still comes
    ],
)
def test_the_note_names_the_rebase_of_the_project_given_by_dash_c(stopped, capsys, argv):
    main(["-C", str(stopped), *argv])
    assert NOTE in capsys.readouterr().err


def test_rebase_says_its_own_state_and_no_note_after_it(stopped, capsys):
    main(["-C", str(stopped), "rebase", "--onto", "v2"])
    err = capsys.readouterr().err
    assert NOTE not in err


def test_no_note_for_the_cwd_when_the_command_ran_elsewhere(stopped, capsys, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    main(["-C", str(other), "top"])
    assert NOTE not in capsys.readouterr().err


def test_a_ctrl_c_before_the_command_is_parsed_says_no_command_ran(stopped, capsys, monkeypatch):
    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(app.LazyGroup, "get_command", interrupted)
    assert main(["-C", str(stopped), "push"]) == 130
    err = capsys.readouterr().err
    assert "interrupted (Ctrl-C): no command ran, nothing was changed" in err
    assert NOTE not in err
