"""Kept smoke environments (FORKPATCH_SMOKE_ENV_CACHE): reused only exactly as made.

The same wheel through the same interpreter reuses the environment (no venv, no pip);
a file changed, added or removed in it since it was made, and it is made afresh; a run
that finds it in use makes its own; ``--deps index`` never keeps one.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from pathlib import Path

import pytest

from forkpatch.smoke import envcache
from support import smoke
from support.cli import Runner


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "envs"
    monkeypatch.setenv(envcache.CACHE_VAR, str(where))
    return where


def _made(root: Path) -> Path:
    venv = root / "venv"
    (venv / "lib" / "pkg" / "__pycache__").mkdir(parents=True)
    (venv / "lib" / "pkg" / "mod.py").write_text("x = 1\n", encoding="utf-8")
    (venv / "bin").mkdir()
    (venv / "bin" / "python").symlink_to(sys.executable)
    return venv


def _entry(cache: Path) -> envcache.CacheEntry:
    entry = envcache.open_entry(["ab" * 32], "system", sys.executable)
    assert entry is not None
    return entry


CHANGES = {
    "edited": lambda v: (v / "lib" / "pkg" / "mod.py").write_text("x = 2\n", encoding="utf-8"),
    "added": lambda v: (v / "lib" / "pkg" / "evil.py").write_text("", encoding="utf-8"),
    "removed": lambda v: (v / "lib" / "pkg" / "mod.py").unlink(),
    "relinked": lambda v: ((v / "bin" / "python").unlink(), (v / "bin" / "python").symlink_to("/")),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_kept_environment_is_reused_only_as_it_was_made(cache: Path, change: str) -> None:
    entry = _entry(cache)
    assert entry.valid() == "not made yet"
    venv = _made(entry.venv.parent)
    entry.seal()
    (venv / "lib" / "pkg" / "__pycache__").mkdir()
    (venv / "lib" / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"planted")
    assert entry.valid() is None  # bytecode is not evidence: removed, not compared
    assert not (venv / "lib" / "pkg" / "__pycache__").exists()
    CHANGES[change](venv)
    why = entry.valid()
    assert why is not None and "changed since it was made" in why
    entry.release()


def test_an_entry_in_use_is_not_shared(cache: Path) -> None:
    entry = _entry(cache)
    assert envcache.open_entry(["ab" * 32], "system", sys.executable) is None
    entry.release()
    assert envcache.open_entry(["ab" * 32], "system", sys.executable) is not None


def test_no_cache_for_index_deps_or_when_unset(cache: Path, monkeypatch) -> None:
    assert envcache.open_entry(["ab" * 32], "index", sys.executable) is None
    monkeypatch.delenv(envcache.CACHE_VAR)
    assert envcache.open_entry(["ab" * 32], "system", sys.executable) is None


def test_the_key_is_the_wheels_the_mode_and_the_interpreter() -> None:
    key = envcache.cache_key(["a", "b"], "system", sys.executable)
    assert key == envcache.cache_key(["b", "a"], "system", sys.executable)
    assert key != envcache.cache_key(["a", "c"], "system", sys.executable)
    assert key != envcache.cache_key(["a", "b"], "none", sys.executable)


def test_old_entries_are_removed(cache: Path) -> None:
    made = []
    for n in range(envcache.KEEP + 2):
        entry = envcache.open_entry([f"{n:064x}"], "system", sys.executable)
        assert entry is not None
        _made(entry.path)
        entry.seal()
        os.utime(entry.path / envcache.MANIFEST, (1000 + n, 1000 + n))
        entry.release()
        made.append(entry.path)
    last = envcache.open_entry(["f" * 64], "system", sys.executable)
    assert last is not None
    kept = [p for p in made if (p / envcache.MANIFEST).is_file()]
    assert kept == made[-(envcache.KEEP - 1) :]
    last.release()


@pytest.mark.slow
def test_a_second_smoke_of_the_same_wheel_reuses_its_environment(
    example_build, tmp_path: Path, capsys, cache: Path
) -> None:
    project = smoke.copy_project(example_build, tmp_path / "project")
    run = Runner(project, capsys)
    args = ("smoke", str(example_build.wheel), "--tier", "static", "--json")
    _c, out1, err1 = run(*args, expect=None)
    assert "install 1 wheel(s)" in err1
    _c, out2, err2 = run(*args, expect=None)
    assert "reused the kept smoke environment" in err2 and "install 1 wheel(s)" not in err2
    outcomes = [{c["id"]: c["outcome"] for c in json.loads(o)["checks"]} for o in (out1, out2)]
    assert outcomes[0] == outcomes[1]
    assert outcomes[1]["static.installed-from-wheel"] == "passed"
    # A file of the wheel changed in the kept environment: made afresh, and the run
    # sees the wheel's own file again.
    (venv,) = cache.glob("*/venv")
    (init,) = venv.glob("lib/python*/site-packages/vllm/__init__.py")
    init.write_text("raise SystemExit('tampered')\n", encoding="utf-8")
    _c, out3, err3 = run(*args, expect=None)
    assert "changed since it was made" in err3 and "install 1 wheel(s)" in err3
    assert {c["id"]: c["outcome"] for c in json.loads(out3)["checks"]} == outcomes[0]
    assert "tampered" not in init.read_text(encoding="utf-8")
    # Held by another run: this one makes its own.
    with open(next(cache.glob("*/lock")), "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _c, _out4, err4 = run(*args, expect=None)
    assert "is in use: a fresh one is made" in err4
