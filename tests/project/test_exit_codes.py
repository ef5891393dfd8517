"""Every exit status is a class in forkpatch.errors, and README.md's table lists exactly them."""

from __future__ import annotations

import inspect
import re

import forkpatch.errors as errors
from forkpatch.cli import main
from support import REPO_ROOT

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


def test_an_unexpected_exception_is_internal_error_4(monkeypatch, capsys) -> None:
    import forkpatch.cli as cli_module

    def boom(*_a: object, **_k: object) -> None:
        raise RuntimeError("kaboom")

    monkeypatch.setattr(cli_module.cli, "main", boom)
    assert main(["status"]) == errors.InternalError.exit_code == 4
    err = capsys.readouterr().err
    assert "internal error: RuntimeError: kaboom" in err and "--debug" in err


def test_usage_error_is_2(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["no-such-command"]) == 2
    assert main(["status", "--no-such-option"]) == 2
