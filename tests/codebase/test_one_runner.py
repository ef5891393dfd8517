"""External programs are started in one place: forkpatch.proc (its own session and
process group, a deadline, a bounded tail of the output, secrets redacted); git's
calls in git.py. The few other modules that import subprocess are listed with why."""

from __future__ import annotations

import ast
from pathlib import Path

import forkpatch

SRC = Path(forkpatch.__file__).resolve().parent

# module -> why it may import subprocess itself
ALLOWED = {
    "proc.py": "the runner",
    "cmdserver/client.py": "starts the command server, detached (no output to read)",
    "git.py": "git's runner (its calls, its cat-file and fast-import pipes)",
    # Copied into the smoke venv and run there with the standard library alone:
    # forkpatch (and so proc.py) is not importable there.
    "smoke/incheck/registry.py": "runs in the smoke venv, stdlib only",
    "smoke/incheck/static.py": "runs in the smoke venv, stdlib only",
    "smoke/incheck/gpujit.py": "runs in the smoke venv, stdlib only",
    # git calls outside git.py (rev-parse, the example fork's commits);
    # they belong to git.py, whose owner moves them there.
    "track/bot.py": "git rev-parse of the user's clone",
    "example.py": "git, building the example fork",
    "forkrepo.py": "a type annotation of git's result",
}


def _importers() -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "subprocess" or n.startswith("subprocess.") for n in names):
                out.setdefault(rel, []).append(node.lineno)
            if any(n in ("os", "pty") for n in names) and isinstance(node, ast.ImportFrom):
                bad = {a.name for a in node.names} & {"system", "popen", "spawnv", "fork"}
                if bad:
                    out.setdefault(rel, []).append(node.lineno)
    return out


def _os_spawns() -> list[str]:
    """os.system / os.popen / os.spawn* / os.exec* calls: programs started around proc."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            f = node.func
            starts = f.attr in ("system", "popen") or f.attr.startswith(("spawn", "exec"))
            if isinstance(f.value, ast.Name) and f.value.id == "os" and starts:
                found.append(f"{rel}:{node.lineno} os.{f.attr}")
    return found


def test_subprocess_is_imported_only_by_the_runner_and_the_listed_modules() -> None:
    importers = _importers()
    unlisted = {rel: lines for rel, lines in importers.items() if rel not in ALLOWED}
    assert unlisted == {}, "start programs through forkpatch.proc.run"
    # the list stays true: a module that no longer imports it leaves the list
    assert sorted(set(ALLOWED) - set(importers)) == []


def test_no_program_is_started_through_os() -> None:
    assert [s for s in _os_spawns() if not s.startswith("smoke/incheck/")] == []


def test_the_runner_is_on_the_ground_floor() -> None:
    """proc imports no forkpatch module but redact (the build, the smoke suite, the
    publisher and the tracker are all above it)."""
    from tests.codebase.test_import_graph import import_graph

    graph = import_graph()
    assert graph["forkpatch.proc"] <= {"forkpatch.redact"}
    assert graph["forkpatch.redact"] == set()
    users = {m for m, targets in graph.items() if "forkpatch.proc" in targets}
    for mod in ("forkpatch.wheels.runner", "forkpatch.smoke.env", "forkpatch.smoke.team"):
        assert mod in users, mod
