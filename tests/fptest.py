"""Shared test helpers (importable as `fptest`): scratch git repos, the CLI runner, snapshots.

Kept out of conftest.py on purpose: several test directories have their own
conftest.py, and `from conftest import ...` would pick whichever came first."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from forkpatch.cli import main as cli_main

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test Author", "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Test Author", "GIT_COMMITTER_EMAIL": "test@example.invalid",
    "GIT_AUTHOR_DATE": "2026-06-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-06-01T00:00:00Z",
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
}


class ScratchRepo:
    """A real git repository for tests: add_file / commit / tag helpers."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str, input: bytes | None = None) -> str:
        env = {**os.environ, **GIT_ENV}
        for k in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
            env.pop(k, None)
        return subprocess.run(["git", "-C", str(self.path), *args], check=True, env=env,
                              input=input, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE).stdout.decode().strip()

    def add_file(self, rel: str, content: str | bytes, mode: int | None = None) -> Path:
        p = self.path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            content = content.encode()
        p.write_bytes(content)
        if mode is not None:
            p.chmod(mode)
        return p

    def remove_file(self, rel: str) -> None:
        (self.path / rel).unlink()

    def read(self, rel: str) -> bytes:
        return (self.path / rel).read_bytes()

    def commit(self, message: str = "change") -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")

    def tag(self, name: str, ref: str = "HEAD") -> str:
        self.git("tag", "-a", name, "-m", name, ref)
        return self.git("rev-parse", f"{name}^{{commit}}")

    def rev(self, ref: str) -> str:
        return self.git("rev-parse", ref)


class Runner:
    """Runs the forkpatch CLI in-process in a project directory."""

    def __init__(self, cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.cwd = cwd
        self.capsys = capsys

    def __call__(self, *args: str, expect: int | None = 0) -> tuple[int, str, str]:
        self.capsys.readouterr()
        old = Path.cwd()
        os.chdir(self.cwd)
        try:
            code = cli_main(list(args))
        finally:
            os.chdir(old)
        out, err = self.capsys.readouterr()
        if expect is not None:
            assert code == expect, f"forkpatch {' '.join(args)} -> {code}\nstdout:{out}\nstderr:{err}"
        return code, out, err


def snapshot(project: Path) -> dict[str, bytes]:
    """Bytes of series.yaml and every file in patches/ (to assert nothing changed)."""
    out = {"series.yaml": (project / "series.yaml").read_bytes()}
    for p in sorted((project / "patches").rglob("*")):
        if p.is_file():
            out[str(p.relative_to(project))] = p.read_bytes()
    return out
