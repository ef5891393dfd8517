"""The locale never changes what forkpatch reads, writes or whether it finishes.

Every file is read and written as UTF-8 (or as bytes), whatever the locale says:
under LC_ALL=C / POSIX with UTF-8 mode off (Python's locale encoding is then ASCII)
``init`` used to crash on a UTF-8 ``.gitignore`` (under Latin-1 it rewrote it as
mojibake); a non-ASCII ``-m`` summary crashed ``new``. Output that the terminal's
encoding cannot hold is escaped, never a crash. The README workflow under each locale
gives the bytes it gives under C.UTF-8. (tests/codebase/test_explicit_encodings.py
holds every ``open``/``read_text``/``subprocess`` call in src/ to an explicit
encoding.)
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from support.cli import fp
from support.projects import copy_example, snapshot
from support.reliability import Row

FP8 = "vllm/model_executor/layers/quantization/online/fp8.py"
NEW_FILE = "vllm/naïve/größe.py"
GITIGNORE = "# Größe der Dateien\n*.bak\n".encode() + b"caf\xe9.tmp\n"  # the last in Latin-1


def _have_locale(name: str) -> bool:
    out = subprocess.run(["locale", "-a"], capture_output=True, check=False).stdout.decode()
    want = name.lower().replace("-", "")
    return any(want == line.strip().lower().replace("-", "") for line in out.splitlines())


LOCALES: dict[str, dict[str, str]] = {
    "LC_ALL=C, UTF-8 mode off": {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0"},
    "LANG=POSIX, no coercion": {
        "LC_ALL": "",
        "LC_CTYPE": "",
        "LANG": "POSIX",
        "PYTHONUTF8": "0",
        "PYTHONCOERCECLOCALE": "0",
    },
    "an ASCII terminal (PYTHONIOENCODING=ascii)": {
        "LC_ALL": "C",
        "PYTHONUTF8": "0",
        "PYTHONIOENCODING": "ascii",
    },
    "LANG=en_US.ISO-8859-1": {"LC_ALL": "en_US.ISO-8859-1", "PYTHONUTF8": "0"},
}
UTF8 = {"LC_ALL": "C.UTF-8", "PYTHONUTF8": "1"}


def _locale_env(name: str, tmp: Path) -> dict[str, str]:
    """The environment for ``name``; a Latin-1 locale this machine lacks is compiled
    into ``tmp`` with localedef (LOCPATH), or the case skips."""
    env = dict(LOCALES[name])
    wanted = env.get("LC_ALL", "")
    if "ISO" in wanted and not _have_locale(wanted):
        where = tmp / "locales"
        where.mkdir()
        made = subprocess.run(
            ["localedef", "-i", "en_US", "-f", "ISO-8859-1", str(where / wanted)],
            capture_output=True,
            check=False,
        )
        if made.returncode != 0 or not (where / wanted).exists():
            pytest.skip(f"no {wanted} locale here, and localedef cannot make one")
        env["LOCPATH"] = str(where)
    return env


def _fp(project: Path, env: dict[str, str], *args: str) -> str:
    proc = fp(project, *args, extra_env=env)
    assert proc.returncode == 0, f"forkpatch {' '.join(args)} -> {proc.returncode}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    return proc.stdout


def _arg(text: str, env: dict[str, str]) -> str:
    """``text`` as a terminal in ``env``'s locale sends it: Latin-1 bytes in a Latin-1
    locale, UTF-8 bytes otherwise (a UTF-8 terminal under LC_ALL=C)."""
    if "ISO-8859-1" in env.get("LC_ALL", ""):
        return text.encode("latin-1").decode("utf-8", "surrogateescape")
    return text


def workflow(root: Path, env: dict[str, str], capsys) -> dict[str, bytes]:
    ex = copy_example(root, capsys, with_project=False)
    project = ex.project
    (project / ".gitignore").write_bytes(GITIGNORE)
    _fp(project, env, "init", "--fork-url", str(ex.fork.path), "--base", "v1.2.1")
    _fp(project, env, "import", *map(str, ex.incoming))
    _fp(project, env, "apply")
    _fp(project, env, "new", "naive-sizes", "-m", _arg("Größe für naïve widths", env))
    wt = project / ".forkpatch" / "worktree"
    (wt / NEW_FILE).parent.mkdir(parents=True)
    (wt / NEW_FILE).write_bytes("SIZE = 'größe'\n".encode())
    _fp(project, env, "refresh")
    # A tracked file with a non-ASCII name, changed: git status names it (the phantom
    # and conflict-marker checks read it by the file system's encoding of git's bytes).
    (wt / NEW_FILE).write_bytes("SIZE = 'größe'\nWIDTH = 'naïve'\n".encode())
    _fp(project, env, "refresh")
    table = fp(project, "status", extra_env=env)
    assert table.returncode == 0 and "naive-sizes" in table.stdout + table.stderr
    _fp(project, env, "export")
    check = json.loads(_fp(project, env, "check", "--onto", "v1.3.0", "--json"))
    _fp(project, env, "rebase", "--onto", "v1.3.0")
    status = json.loads(_fp(project, env, "status", "--json"))
    status.pop("worktree")
    out = snapshot(project)
    out["series.yaml"] = out["series.yaml"].replace(str(root).encode(), b"ROOT")
    out[".gitignore"] = (project / ".gitignore").read_bytes()
    out["check"] = json.dumps(check["patches"], sort_keys=True).encode()
    out["status"] = json.dumps(status, sort_keys=True).encode()
    return out


@pytest.fixture(scope="module")
def utf8(tmp_path_factory) -> dict[str, bytes]:
    return workflow(tmp_path_factory.mktemp("utf8"), UTF8, None)


@pytest.mark.parametrize("name", list(LOCALES))
def test_the_workflow_under_a_non_utf8_locale_gives_the_same_bytes(name, utf8, tmp_path, capsys):
    env = _locale_env(name, tmp_path)
    got = workflow(tmp_path / "w", env, capsys)
    # init added its lines to the user's .gitignore and kept every byte it had.
    assert got[".gitignore"].startswith(GITIGNORE), got[".gitignore"]
    assert got.keys() == utf8.keys()
    for key in utf8:
        assert got[key] == utf8[key], f"{key}:\n{got[key]!r}\n{utf8[key]!r}"


RELIABILITY = [
    Row(
        "the user's environment",
        "a non-UTF-8 locale: LC_ALL=C / POSIX with UTF-8 mode off, an ASCII terminal, "
        "ISO-8859-1 (made with localedef where not installed)",
        f"{len(LOCALES)} locales x the workflow (a UTF-8 .gitignore with a Latin-1 line, "
        "non-ASCII summary and file name)",
        "no crash; .gitignore kept byte for byte; patches, series.yaml and verdicts as "
        "under C.UTF-8; unshowable output escaped",
    ),
]
