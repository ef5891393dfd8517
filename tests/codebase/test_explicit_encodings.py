"""Every text file forkpatch reads or writes names its encoding.

Without one, Python uses the locale's: under a Latin-1 locale a UTF-8 .gitignore
comes back as mojibake, under LC_ALL=C (PYTHONUTF8=0) a non-ASCII byte crashes the
command. So every ``open()`` in text mode, ``read_text`` / ``write_text``, text-mode
``subprocess`` call and ``TextIOWrapper`` in src/ passes ``encoding=`` (or works in
bytes).
"""

from __future__ import annotations

import ast
from pathlib import Path

import forkpatch

SRC = Path(forkpatch.__file__).resolve().parent

SUBPROCESS = {"run", "Popen", "check_output", "check_call", "call"}


def _kw(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is_true(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _text_mode(mode: ast.expr | None) -> bool:
    """A literal mode without 'b' (or none: 'r'); a computed mode counts as text."""
    if mode is None:
        return True
    return not (
        isinstance(mode, ast.Constant) and isinstance(mode.value, str) and "b" in mode.value
    )


def problems(path: Path) -> list[str]:
    rel = path.relative_to(SRC).as_posix()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or _kw(node, "encoding") is not None:
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        owner = func.value if isinstance(func, ast.Attribute) else None
        bad = False
        if isinstance(func, ast.Name) and name == "open":
            bad = _text_mode(node.args[1] if len(node.args) > 1 else _kw(node, "mode"))
        elif name == "open" and isinstance(owner, ast.Call):  # Path(...).open(mode)
            bad = _text_mode(node.args[0] if node.args else _kw(node, "mode"))
        elif name in ("read_text", "write_text"):
            # A positional argument is the encoding (importlib.metadata's read_text:
            # the member's name, read as UTF-8 by importlib itself).
            bad = not (name == "read_text" and node.args) and not (
                name == "write_text" and len(node.args) > 1
            )
        elif name == "TextIOWrapper":
            bad = True
        elif name in SUBPROCESS and isinstance(owner, ast.Name) and owner.id == "subprocess":
            bad = _is_true(_kw(node, "text")) or _is_true(_kw(node, "universal_newlines"))
        elif name == "NamedTemporaryFile" or name == "TemporaryFile":
            bad = _text_mode(node.args[0] if node.args else _kw(node, "mode")) and (
                node.args or _kw(node, "mode") is not None
            )
        if bad:
            out.append(f"{rel}:{node.lineno}: {ast.unparse(node)[:90]}")
    return out


def test_every_text_file_and_text_process_names_its_encoding():
    found = [p for path in sorted(SRC.rglob("*.py")) for p in problems(path)]
    assert found == [], "text I/O without encoding=:\n" + "\n".join(found)


def test_the_check_sees_what_it_looks_for(tmp_path):
    """Each form the check knows is found without encoding= and passes with it."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import subprocess\nfrom pathlib import Path\n"
        "open('x')\nopen('x', 'w')\nPath('x').read_text()\nPath('x').write_text('t')\n"
        "Path('x').open('a')\nsubprocess.run(['x'], text=True)\n"
        "subprocess.Popen(['x'], universal_newlines=True)\n",
        encoding="utf-8",
    )
    good = tmp_path / "good.py"
    good.write_text(
        "import subprocess\nfrom pathlib import Path\n"
        "open('x', 'rb')\nopen('x', 'w', encoding='utf-8')\n"
        "Path('x').read_text(encoding='utf-8')\nPath('x').read_bytes()\n"
        "subprocess.run(['x'], text=True, encoding='utf-8')\nsubprocess.run(['x'])\n",
        encoding="utf-8",
    )
    global SRC
    saved, SRC = SRC, tmp_path
    try:
        assert len(problems(bad)) == 7
        assert problems(good) == []
    finally:
        SRC = saved
