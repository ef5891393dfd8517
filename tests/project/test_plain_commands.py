"""The plain forms of `top` and `status` run without click (forkpatch.cli.dispatch):
the same exit status, stdout and stderr as through the click group, for every state
the project may be in; any other form goes through click."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from forkpatch.cli import dispatch, main
from forkpatch.cli.context import Ctx
from support.cli import env


@pytest.mark.parametrize(
    "argv",
    [
        ["top"],
        ["status"],
        ["st"],
        ["series"],
        ["status", "--json"],
        ["-q", "top"],
        ["--quiet", "status"],
        ["--debug", "status", "--json"],
        ["-C", "somewhere", "top"],
        ["--fork-repo", "/some/fork", "-C", "somewhere", "-q", "--debug", "status"],
    ],
)
def test_the_plain_forms(argv):
    assert dispatch.plain_command(argv, Ctx()) is not None


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--help"],
        ["top", "--help"],
        ["status", "-h"],
        ["-V"],
        ["status", "--upstream"],
        ["status", "--json", "--json"],
        ["status", "--js"],  # click's prefix of a long option: click answers it
        ["top", "extra"],
        ["-q", "-q", "top"],
        ["-q", "--quiet", "top"],
        ["-C", "a", "-C", "b", "top"],
        ["-Csomewhere", "top"],
        ["--fork-repo=/x", "top"],
        ["-C", "--debug", "top"],
        ["-C", "", "top"],
        ["-C"],
        ["--no-such-option", "top"],
        ["tops"],
        ["push"],
        ["rebase", "--continue"],
    ],
)
def test_every_other_form_goes_through_click(argv):
    assert dispatch.plain_command(argv, Ctx()) is None


def test_shell_completion_goes_through_click(monkeypatch):
    monkeypatch.setenv("_FORKPATCH_COMPLETE", "bash_complete")
    assert dispatch.plain_command(["status"], Ctx()) is None


def test_a_directory_click_would_refuse_goes_through_click(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x", encoding="utf-8")
    assert dispatch.plain_command(["-C", str(a_file), "top"], Ctx()) is None
    assert dispatch.plain_command(["-C", str(tmp_path / "absent"), "top"], Ctx()) is not None
    assert dispatch.plain_command(["-C", str(tmp_path), "top"], Ctx()) is not None


def _both(monkeypatch, capsys, cwd: Path, argv: list[str]) -> tuple[object, object]:
    """(exit status, stdout, stderr) of ``argv``: its plain run, then through click."""
    monkeypatch.chdir(cwd)
    assert dispatch.plain_command(argv, Ctx()) is not None
    capsys.readouterr()
    plain = (main(argv), *capsys.readouterr())
    with monkeypatch.context() as m:
        m.setattr(dispatch, "plain_command", lambda _argv, _c: None)
        through_click = (main(argv), *capsys.readouterr())
    if "--debug" in argv:
        return _frameless(plain), _frameless(through_click)
    return plain, through_click


def _frameless(got: tuple[object, ...]) -> tuple[object, ...]:
    """--debug's traceback without its frames (click's own are not on the plain path)."""
    code, out, err = got
    assert isinstance(err, str)
    lines = err.splitlines(keepends=True)
    kept = [line for line in lines if not line.startswith(("  File ", "    "))]
    return code, out, "".join(kept)


COMMAND_LINES = [
    ["top"],
    ["status"],
    ["st", "--json"],
    ["-q", "status"],
    ["--debug", "top"],
]


@pytest.mark.parametrize("argv", COMMAND_LINES)
@pytest.mark.parametrize("state", ["applied", "popped", "no work tree", "edited files"])
def test_a_plain_run_answers_as_click_does(example_project, monkeypatch, capsys, argv, state):
    project, run = example_project
    if state != "no work tree":
        run("apply")
    if state == "popped":
        run("pop", "--all")
    if state == "edited files":
        patch = sorted((project / "patches").glob("*.patch"))[0]
        patch.write_bytes(patch.read_bytes() + b"\n")
        (project / "patches" / "orphan.patch").write_text("x\n", encoding="utf-8")
    main(["status"])  # the kept answer made: both runs below read it
    plain, through_click = _both(monkeypatch, capsys, project, argv)
    assert plain == through_click
    if argv[-1] == "--json":
        json.loads(plain[1])


@pytest.mark.parametrize("argv", [["top"], ["status"], ["status", "--json"]])
def test_errors_of_a_plain_run_are_click_s(tmp_path, example_project, monkeypatch, capsys, argv):
    project, run = example_project
    run("apply")
    # Not a project; a -C that does not exist; a series.yaml with an error.
    plain, through_click = _both(monkeypatch, capsys, tmp_path, argv)
    assert plain == through_click and plain[0] != 0
    missing = ["-C", str(tmp_path / "absent"), *argv]
    plain, through_click = _both(monkeypatch, capsys, tmp_path, missing)
    assert plain == through_click and plain[0] != 0
    series = project / "series.yaml"
    series.write_text(series.read_text(encoding="utf-8") + "bogus: 1\n", encoding="utf-8")
    plain, through_click = _both(monkeypatch, capsys, project, argv)
    assert plain == through_click and plain[0] != 0
    assert "series.yaml:" in plain[2]


@pytest.mark.parametrize("argv", [["top"], ["status"]])
def test_a_closed_stdout_ends_a_plain_run_quietly(example_project, argv):
    """`forkpatch top | true`: exit 1 and no traceback, as click does it."""
    project, run = example_project
    run("apply")
    code = (
        "import os, sys\n"
        "r, w = os.pipe(); os.close(r); os.dup2(w, 1)\n"
        "from forkpatch.cli import dispatch\n"
        "if sys.argv[1] == 'click':\n"
        "    dispatch.plain_command = lambda argv, c: None\n"
        "sys.exit(dispatch.main(sys.argv[2:]))\n"
    )
    got = [
        subprocess.run(
            [sys.executable, "-c", code, how, *argv],
            cwd=project,
            env=env(),
            capture_output=True,
            text=True,
        )
        for how in ("plain", "click")
    ]
    assert [g.returncode for g in got] == [1, 1]
    assert got[0].stderr == got[1].stderr
    assert "Traceback" not in got[0].stderr
