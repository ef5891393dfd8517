"""Helpers shared by the integration tests: projects copied from a template.

The example fork (plus a project with the example series imported) is built
once per test session and copied for every test with ``shutil.copytree``: a
test may move tags in its copy of the fork without disturbing the others.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from fptest import Runner, ScratchRepo, snapshot

from forkpatch.series import load_series

EXAMPLE_NAMES = ["capability-floor", "odd-width-padding", "eager-block-cast", "cli-version"]

_TEMPLATE: Path | None = None


def _template() -> Path:
    """fork/ (the example fork), incoming/ (format-patch files), project/ (imported)."""
    global _TEMPLATE
    if _TEMPLATE is None:
        from forkpatch.example import make_fork, write_example_patches
        from forkpatch.importer import import_patches
        from forkpatch.ops import init_project

        root = Path(tempfile.mkdtemp(prefix="forkpatch-template-"))
        atexit.register(shutil.rmtree, root, True)
        make_fork(root / "fork")
        incoming = write_example_patches(root / "fork", "v1.2.1", root / "incoming")
        project = init_project(
            root / "project",
            fork_url=str(root / "fork"),
            base_tag="v1.2.1",
            fork_name=None,
            distribution="1cat-vllm",
            fork_override=None,
        )
        import_patches(project, files=incoming, quilt_dir=None)
        _TEMPLATE = root
    return _TEMPLATE


@dataclass
class Example:
    root: Path
    fork: ScratchRepo
    project: Path
    incoming: list[Path]
    run: Runner

    @property
    def wt(self) -> Path:
        return self.project / ".forkpatch" / "worktree"

    def snap(self) -> dict[str, bytes]:
        return snapshot(self.project)

    def patch(self, name: str) -> Path:
        return self.project / "patches" / f"{name}.patch"


def _fork_repo(path: Path) -> ScratchRepo:
    repo = ScratchRepo.__new__(ScratchRepo)
    repo.path = path
    return repo


def copy_example(dest: Path, capsys, *, with_project: bool = True) -> Example:
    """A private copy of the template; series.yaml's fork.url points at the copy's fork."""
    src = _template()
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src / "fork", dest / "fork", symlinks=True)
    shutil.copytree(src / "incoming", dest / "incoming")
    project = dest / "project"
    if with_project:
        shutil.copytree(src / "project", project, symlinks=True)
        series = project / "series.yaml"
        series.write_text(series.read_text().replace(str(src / "fork"), str(dest / "fork")))
        # The store borrows the fork's objects: point it at this copy (ForkRepo
        # would rewrite the line itself; doing it here keeps the copy self-contained).
        alt = project / ".forkpatch" / "repo.git" / "objects" / "info" / "alternates"
        alt.write_text(f"{(dest / 'fork' / '.git' / 'objects').resolve()}\n")
    else:
        project.mkdir()
    return Example(
        root=dest,
        fork=_fork_repo(dest / "fork"),
        project=project,
        incoming=sorted((dest / "incoming").glob("*.patch")),
        run=Runner(project, capsys),
    )


def git(cwd: Path, *args: str, input: bytes | None = None, check: bool = True) -> str:
    from fptest import GIT_ENV

    env = {**os.environ, **GIT_ENV}
    for k in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        env.pop(k, None)
    proc = subprocess.run(
        ["git", "-C", str(cwd), *args],
        env=env,
        input=input,
        capture_output=True,
        check=check,
    )
    return proc.stdout.decode("utf-8", "surrogateescape").strip()


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


def mtimes(project: Path) -> dict[str, int]:
    """mtime_ns of series.yaml and every patch file."""
    paths = [project / "series.yaml", *sorted((project / "patches").rglob("*"))]
    return {str(p.relative_to(project)): p.stat().st_mtime_ns for p in paths if p.is_file()}


def scratch_project(
    tmp_path: Path, capsys, files: dict[str, str | bytes], *, tag: str = "v1"
) -> tuple[ScratchRepo, Path, Runner]:
    """A scratch fork holding ``files`` tagged ``tag``, and an initialised project on it."""
    fork = ScratchRepo(tmp_path / "fork")
    for rel, content in files.items():
        fork.add_file(rel, content)
    fork.commit("base")
    fork.tag(tag)
    project = tmp_path / "project"
    project.mkdir()
    run = Runner(project, capsys)
    run("init", "--fork-url", str(fork.path), "--base", tag)
    return fork, project, run


def load(project: Path):
    return load_series(project / "series.yaml")


def numbered(n: int, prefix: str = "line") -> str:
    return "".join(f"{prefix} {i}\n" for i in range(1, n + 1))


def write_diff(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path
