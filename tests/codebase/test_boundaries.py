"""What comes from outside goes through one door per boundary: HTTP through fetch.py,
terminal output through the log module (or the escaping helper), input files through
fsutil.read_regular."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import forkpatch

SRC = Path(forkpatch.__file__).resolve().parent
# Code that runs inside the smoke venv, not in forkpatch's process.
OUTSIDE_THE_PROCESS = ("smoke/incheck/", "smoke/env.py", "example.py")


@functools.cache  # parsed once for the tests below, which only read the trees
def _modules() -> list[tuple[str, ast.Module]]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if not rel.startswith(OUTSIDE_THE_PROCESS):
            out.append((rel, ast.parse(path.read_text(encoding="utf-8"))))
    return out


def _calls(tree: ast.Module) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)]


def test_only_fetch_speaks_http() -> None:
    users = []
    for rel, tree in _modules():
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n in ("urllib.request", "http.client", "requests") for n in names):
                users.append(f"{rel}:{node.lineno}")
    assert [u for u in users if not u.startswith("fetch.py:")] == []


# Lines that write forkpatch's own text (no outside text in it) straight to stderr.
OWN_TEXT = {
    "fsutil.py": ("test pause at",),
    "rebase/run.py": ("test pause at",),
    # a docker build line is escaped once (line = terminal(line)) before these writes
    "wheels/container.py": ("self.status(now)", "line + "),
    "wheels/wheelhouse.py": ("wrote ", "wheels in "),
}


def test_terminal_output_is_escaped() -> None:
    """print() to stderr and sys.stderr.write() only in log.py, or on escaped text."""
    raw = []
    for rel, tree in _modules():
        if rel == "log.py":
            continue
        for call in _calls(tree):
            func = call.func
            to_stderr = any(
                k.arg == "file" and "stderr" in ast.unparse(k.value) for k in call.keywords
            )
            is_print = isinstance(func, ast.Name) and func.id == "print" and to_stderr
            if not (is_print or ast.unparse(func) == "sys.stderr.write") or not call.args:
                continue
            first = call.args[0]
            text = ast.unparse(first)
            if isinstance(first, ast.Constant) or "terminal(" in text:
                continue
            if any(own in text for own in OWN_TEXT.get(rel, ())):
                continue
            raw.append(f"{rel}:{call.lineno} {text}")
    assert raw == []


def test_input_files_are_read_through_read_regular() -> None:
    """No read_bytes() / read_text() of a patch file, series.yaml or a report."""
    suspects = []
    for rel, tree in _modules():
        for call in _calls(tree):
            func = call.func
            if not (isinstance(func, ast.Attribute) and func.attr in ("read_bytes", "read_text")):
                continue
            target = ast.unparse(func.value)
            if any(w in target for w in ("patch_path", "series_path", "report")):
                suspects.append(f"{rel}:{call.lineno} {target}.{func.attr}()")
    assert suspects == []
