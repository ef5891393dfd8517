"""Scratch git repositories and file trees: the test identity, diffs, snapshots of trees."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from forkpatch.git import DIFF_OPTIONS

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Test Author",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
    "GIT_AUTHOR_DATE": "2026-06-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-06-01T00:00:00Z",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


def git_env(**extra: str) -> dict[str, str]:
    """This process's environment with the test identity and no inherited repository."""
    env = {**os.environ, **GIT_ENV, **extra}
    for k in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        env.pop(k, None)
    return env


def git(
    cwd: Path | str,
    *args: str,
    input: bytes | None = None,
    check: bool = True,
    date: str | None = None,
) -> str:
    """``git -C cwd ARGS`` with the test identity (``date``: author and committer date)."""
    env = git_env(**({"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date} if date else {}))
    proc = subprocess.run(
        ["git", "-C", str(cwd), *args], env=env, input=input, capture_output=True, check=check
    )
    return proc.stdout.decode("utf-8", "surrogateescape").strip()


class ScratchRepo:
    """A real git repository for tests: add_file / commit / tag helpers.

    ``init=False`` wraps a repository that exists already (a copy of a template)."""

    def __init__(self, path: Path, *, init: bool = True) -> None:
        self.path = path
        if init:
            path.mkdir(parents=True, exist_ok=True)
            self.git("init", "-q", "-b", "main")

    def git(self, *args: str, input: bytes | None = None) -> str:
        return git(self.path, *args, input=input)

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


def _plain_git(repo: Path, *args: str) -> bytes:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "core.autocrlf=false", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    ).stdout


def git_diff(
    tmp: Path,
    before: dict[str, bytes],
    after: dict[str, bytes],
    modes: dict[str, int] | None = None,
) -> bytes:
    """The forkpatch-canonical diff (diff-tree, full index, binary, -M) between two trees."""
    repo = tmp / "repo"
    repo.mkdir()
    _plain_git(repo, "init", "-q")

    def commit(files: dict[str, bytes], chmod: dict[str, int]) -> str:
        for p in _plain_git(repo, "ls-files", "-z").split(b"\0"):
            if p:
                os.unlink(repo / os.fsdecode(p))
        for path, content in files.items():
            full = repo / path
            full.parent.mkdir(parents=True, exist_ok=True)
            full.write_bytes(content)
            os.chmod(full, chmod.get(path, 0o644))
        _plain_git(repo, "add", "-A")
        _plain_git(repo, "commit", "-q", "--allow-empty", "-m", "x")
        return _plain_git(repo, "rev-parse", "HEAD").decode().strip()

    a = commit(before, {})
    b = commit(after, modes or {})
    return _plain_git(repo, "diff-tree", *DIFF_OPTIONS, a, b)


def file_diff(path: str, old: str, new: str, *, header: str = "") -> str:
    """A git diff of ``path`` from the text ``old`` to ``new`` (made by git itself)."""
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp, "a"), Path(tmp, "b")
        a.write_text(old)
        b.write_text(new)
        proc = subprocess.run(
            ["git", "diff", "--no-index", "--no-color", str(a), str(b)],
            capture_output=True,
            text=True,
            check=False,
        )
    body = proc.stdout.split("\n@@", 1)[1]
    return f"{header}diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@" + body


def tree_files(root: Path) -> dict[str, tuple[str, bytes]]:
    """Every file under ``root`` except .git/ and .pc/: path -> (kind, bytes)."""
    out: dict[str, tuple[str, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in (".git", ".pc"))
        for d in dirnames:
            p = Path(dirpath, d)
            if p.is_symlink():
                out[str(p.relative_to(root))] = ("link", os.readlink(p).encode())
        for f in sorted(filenames):
            if f == ".git":  # a linked work tree's pointer file
                continue
            p = Path(dirpath, f)
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p).encode())
            else:
                kind = "exec" if os.access(p, os.X_OK) else "file"
                out[rel] = (kind, p.read_bytes())
    return out


def tree_state(root: Path) -> dict[str, tuple[str, bytes]]:
    """Every entry under ``root`` (links as links, never followed): to prove nothing moved."""
    out: dict[str, tuple[str, bytes]] = {}
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in [*dirnames, *filenames]:
            p = Path(dirpath, name)
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p).encode())
            elif p.is_file():
                out[rel] = (oct(p.stat().st_mode & 0o777), p.read_bytes())
            elif p.is_dir():
                out[rel] = ("dir", b"")
    return out


def ls_tree(git_dir: Path, rev: str) -> dict[str, tuple[str, str]]:
    """Every file (link, submodule) of ``rev`` as ``git ls-tree -r`` lists it: path ->
    (mode, id)."""
    raw = subprocess.run(
        ["git", f"--git-dir={git_dir}", "ls-tree", "-r", "-z", "--full-tree", rev],
        capture_output=True,
        check=True,
        env=git_env(),
    ).stdout
    out = {}
    for item in raw.split(b"\0"):
        if item:
            meta, path = item.split(b"\t", 1)
            mode, _kind, oid = meta.decode().split()
            out[path.decode()] = (mode, oid)
    return out


def numbered(n: int, prefix: str = "line") -> str:
    """``n`` distinct lines: "line 1\\n" ... "line n\\n"."""
    return "".join(f"{prefix} {i}\n" for i in range(1, n + 1))


def replace_once(text: str, old: str, new: str) -> str:
    """``text`` with its first ``old`` replaced by ``new`` (which must be there)."""
    assert old in text
    return text.replace(old, new, 1)


def write_diff(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


class GitCalls:
    """A logging ``git`` to put first on PATH: which git processes a command starts.

    ``path`` is the PATH value to run with; :meth:`take` returns each call's arguments
    (one string per process, in order) and empties the log.
    """

    def __init__(self, root: Path) -> None:
        import shutil
        import stat

        real = shutil.which("git")
        assert real, "git is not on PATH"
        self.dir = root / "git-shim"
        self.dir.mkdir(parents=True)
        self.log = root / "git-calls.log"
        self.log.write_text("")
        shim = self.dir / "git"
        shim.write_text(f'#!/bin/sh\necho "$*" >> "{self.log}"\nexec "{real}" "$@"\n')
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
        self.path = f"{self.dir}{os.pathsep}{os.environ['PATH']}"

    def take(self) -> list[str]:
        calls = self.log.read_text().splitlines()
        self.log.write_text("")
        return calls


def twin_worktree(repo: ScratchRepo, root: Path, name: str, branch: str = "stack") -> Path:
    """A linked work tree of ``repo`` at ``root/name`` on a branch of its own made at
    ``branch`` (two of them: one for forkpatch, its twin for git)."""
    path = root / name
    git(repo.path, "worktree", "add", "-q", "-f", str(path), branch)
    git(repo.path, "branch", "-q", "-f", f"{name}-b", branch)
    git(path, "checkout", "-q", f"{name}-b")
    return path


def index_entries(path: Path) -> str:
    """``git ls-files -s`` of the work tree at ``path``: its index, to compare."""
    return subprocess.run(
        ["git", "ls-files", "-s"], cwd=path, env=git_env(), capture_output=True, check=True
    ).stdout.decode()
