"""Patch series in the styles other teams write, made by the real tools.

A :class:`SeriesMaker` is a clone of a scratch fork at its base tag, in a
directory named like a package (quilt names its ``Index:`` and ``.orig`` paths
after it). Each patch is written by a real tool (``git format-patch``, ``quilt
refresh``, GNU ``diff -uNr``) from the current tree, then committed there, so
the next patch stacks on it, as in a real series.

:func:`quilt_push` and :func:`git_apply` apply a list of patch files to a fresh
checkout with the real tools; the trees they give are the references.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from support.git import ScratchRepo, git, git_env, tree_files

AUTHOR_ENV = {
    "GIT_AUTHOR_NAME": "Jörg Entwickler",
    "GIT_AUTHOR_EMAIL": "joerg@example.org",
    "GIT_AUTHOR_DATE": "2024-09-03T10:00:00+02:00",
    "GIT_COMMITTER_DATE": "2024-09-03T10:00:00+02:00",
}


def run(cwd: Path, *argv: str, input: bytes | None = None, env: Mapping[str, str] | None = None):
    """``argv`` in ``cwd`` with the test identity (and ``env``); its stdout."""
    return subprocess.run(
        argv, cwd=cwd, input=input, env=git_env(**(env or {})), capture_output=True, check=True
    ).stdout


class SeriesMaker:
    def __init__(self, fork: ScratchRepo, root: Path, tag: str, pkg: str = "busybox-1.36"):
        self.root = root
        self.tree = root / pkg
        self.out = root / "made"
        self.out.mkdir(parents=True)
        git(root, "clone", "-q", "--branch", tag, str(fork.path), str(self.tree))

    # ------------------------------------------------------------------ helpers

    def edit(self, files: Mapping[str, str | bytes | None]) -> None:
        for rel, text in files.items():
            p = self.tree / rel
            if text is None:
                p.unlink()
                continue
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(text.encode() if isinstance(text, str) else text)

    def read(self, rel: str) -> str:
        return (self.tree / rel).read_text()

    def _commit(self, message: str) -> str:
        git(self.tree, "add", "-A")
        run(self.tree, "git", "commit", "-q", "-m", message, env=AUTHOR_ENV)
        return git(self.tree, "rev-parse", "HEAD")

    def _save(self, name: str, data: bytes) -> Path:
        path = self.out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path

    # ------------------------------------------------------------------ styles

    def format_patch(
        self,
        name: str,
        message: str,
        files: Mapping[str, str | bytes | None],
        *,
        below_dashes: str = "",
        envelope: bool = True,
        signature: bool = True,
        numbered: bool = False,
    ) -> Path:
        """``git format-patch`` of one commit. ``below_dashes`` is put right after the
        ``---`` line (OE's Upstream-Status there); ``envelope=False`` drops the mbox
        ``From`` line and ``Date:`` (a bare From:/Subject: mail)."""
        self.edit(files)
        self._commit(message)
        argv = ["git", "format-patch", "-1", "--stdout"]
        if numbered:
            argv.append("--numbered")
        if not signature:
            argv.append("--no-signature")
        text = run(self.tree, *argv).decode("utf-8", "surrogateescape")
        if below_dashes:
            text = text.replace("\n---\n", f"\n---\n{below_dashes}", 1)
        if not envelope:
            lines = text.split("\n")
            text = "\n".join(ln for ln in lines[1:] if not ln.startswith("Date: "))
        return self._save(name, text.encode("utf-8", "surrogateescape"))

    def format_patch_series(
        self, name: str, commits: Sequence[tuple[str, Mapping[str, str | bytes | None]]]
    ) -> tuple[Path, list[str]]:
        """``git format-patch --stdout`` of several commits (message, files) into one
        file, mail after mail, and the commit ids its ``From`` lines name."""
        ids = []
        for message, files in commits:
            self.edit(files)
            ids.append(self._commit(message))
        data = run(self.tree, "git", "format-patch", f"-{len(commits)}", "--stdout")
        return self._save(name, data), ids

    def quilt(
        self,
        name: str,
        header: str,
        files: Mapping[str, str | bytes | None],
        *,
        refresh: Sequence[str] = (),
        diff_opts: str = "",
    ) -> Path:
        """``quilt new/add/refresh`` with ``quilt header -r``; ``refresh`` are extra
        options (``--no-timestamps``, ``-p ab``, ``--diffstat``)."""
        qdir, pc = self.root / "q-patches", self.root / "q-pc"
        for d in (qdir, pc):
            shutil.rmtree(d, ignore_errors=True)
        env = {"QUILT_PATCHES": str(qdir), "QUILT_PC": str(pc)}
        if diff_opts:
            env["QUILT_DIFF_OPTS"] = diff_opts
        q = ("quilt", "--quiltrc=-")
        run(self.tree, *q, "new", name, env=env)
        run(self.tree, *q, "add", *files, env=env)
        self.edit(files)
        run(self.tree, *q, "header", "-r", input=header.encode(), env=env)
        run(self.tree, *q, "refresh", *refresh, env=env)
        data = (qdir / name).read_bytes()
        self._commit(f"quilt {name}")
        return self._save(name, data)

    def gnu_diff(self, name: str, header: str, files: Mapping[str, str | bytes | None]) -> Path:
        """``diff -uNr a b`` over the touched files (no ``diff --git``), after ``header``."""
        a, b = self.root / "a", self.root / "b"
        for d in (a, b):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir()
        for rel in files:
            src = self.tree / rel
            if src.exists():
                (a / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, a / rel)
        self.edit(files)
        for rel, text in files.items():
            if text is not None:
                (b / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(self.tree / rel, b / rel)
        proc = subprocess.run(["diff", "-uNr", "a", "b"], cwd=self.root, capture_output=True)
        assert proc.returncode == 1, proc.stderr
        self._commit(f"diff {name}")
        return self._save(name, header.encode() + proc.stdout)


def _checkout(fork: Path, tag: str, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    git(dest.parent, "clone", "-q", "--branch", tag, str(fork), str(dest))
    return dest


def quilt_push(fork: Path, tag: str, patches: Sequence[tuple[str, Path]], dest: Path):
    """The files of ``fork`` at ``tag`` after ``quilt push -a --fuzz=0`` of ``patches``
    ((name in the series, file) in order). Fails on any fuzz or reject."""
    tree = _checkout(fork, tag, dest / "busybox-1.36")
    qdir = dest / "patches"
    qdir.mkdir()
    for rel, path in patches:
        (qdir / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, qdir / rel)
    (qdir / "series").write_text("".join(f"{rel}\n" for rel, _ in patches))
    env = {"QUILT_PATCHES": str(qdir), "QUILT_PC": str(dest / "pc")}
    out = run(tree, "quilt", "--quiltrc=-", "push", "-a", "--fuzz=0", env=env).decode()
    assert "fuzz" not in out.lower() and "offset" not in out.lower(), out
    files = tree_files(tree)
    return files


def git_apply(fork: Path, tag: str, patches: Sequence[Path], dest: Path):
    """The files of ``fork`` at ``tag`` after ``git apply`` of each of ``patches``."""
    tree = _checkout(fork, tag, dest / "checkout")
    for path in patches:
        run(tree, "git", "apply", "--whitespace=nowarn", str(path))
    return tree_files(tree)
