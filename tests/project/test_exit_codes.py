"""Every exit status is a class in forkpatch.errors, and README.md's table lists exactly them."""

from __future__ import annotations

import inspect
import os
import re
import signal
import subprocess
import sys

import pytest

import forkpatch.errors as errors
from forkpatch.cli import main
from support import REPO_ROOT
from support.cli import env
from support.projects import snapshot

README = REPO_ROOT / "README.md"


def _classes() -> dict[int, list[str]]:
    codes: dict[int, list[str]] = {}
    for name, cls in vars(errors).items():
        if inspect.isclass(cls) and issubclass(cls, (errors.ForkpatchError, errors.Finished)):
            codes.setdefault(cls.exit_code, []).append(name)
    return codes


def test_readme_lists_every_exit_code_of_the_error_tree() -> None:
    table = re.findall(r"^\s*\| (\d+) \|", README.read_text(), flags=re.M)
    documented = {int(c) for c in table}
    assert documented == set(_classes()) | {0}, (documented, _classes())


def test_the_module_docstring_names_the_class_of_each_code() -> None:
    doc = errors.__doc__ or ""
    for code, names in _classes().items():
        line = next((ln for ln in doc.splitlines() if re.match(rf"\s+{code}\s", ln)), "")
        assert line, f"exit code {code} is missing from errors.py's table"
        assert any(n in line for n in names), (code, names, line)


@pytest.mark.parametrize(
    "args, where",
    [
        (["apply"], "group"),  # through click
        (["status", "--upstream"], "group"),
        (["status"], "readonly.status"),  # a plain form: without click (cli/dispatch.py)
        (["-q", "top"], "readonly.top"),
    ],
)
def test_an_unexpected_exception_is_internal_error_4(monkeypatch, capsys, args, where) -> None:
    import forkpatch.cli as cli_module
    from forkpatch.cli import readonly

    def boom(*_a: object, **_k: object) -> None:
        raise RuntimeError("kaboom")

    if where == "group":
        monkeypatch.setattr(cli_module.cli, "main", boom)
    else:
        monkeypatch.setattr(readonly, where.split(".")[1], boom)
    assert main(args) == errors.InternalError.exit_code == 4
    err = capsys.readouterr().err
    assert "internal error: RuntimeError: kaboom" in err and "--debug" in err


def test_usage_error_is_2(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["no-such-command"]) == 2
    assert main(["status", "--no-such-option"]) == 2


def _stopped(cwd, *args: str, point: str) -> subprocess.Popen[str]:
    """``python -m forkpatch ARGS`` stopped (SIGSTOP) at the test hook's ``point``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "forkpatch", *args],
        cwd=cwd,
        env=env(FORKPATCH_TEST_PAUSE_AFTER=point),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status), "forkpatch ended before its pause point"
    return proc


def _ctrl_c(proc: subprocess.Popen[str]) -> tuple[int, str]:
    os.kill(proc.pid, signal.SIGINT)
    os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def test_ctrl_c_while_starting_says_nothing_changed(example_project) -> None:
    """Before the command line is loaded (the first few tenths of a second), a Ctrl-C is
    one line and exit 130, never a KeyboardInterrupt traceback out of an import."""
    project, _run = example_project
    before = snapshot(project)
    code, err = _ctrl_c(_stopped(project, "apply", point="start"))
    assert code == 130, err
    assert err == "forkpatch: interrupted while starting; nothing was changed\n", err
    assert snapshot(project) == before


def test_ctrl_c_in_a_command_says_what_state_the_project_is_in(example_project) -> None:
    project, _run = example_project
    code, err = _ctrl_c(_stopped(project, "rebase", "--onto", "v1.3.0", point="journal"))
    assert code == 130, err
    assert "Traceback" not in err and "error: aborted" not in err, err
    assert "interrupted (Ctrl-C): series.yaml and patches/ are as they were" in err, err
    # The rebase journal was written: how to go on or back is said too.
    assert "note: a rebase onto v1.3.0 was interrupted" in err, err
    assert "rebase --abort" in err
