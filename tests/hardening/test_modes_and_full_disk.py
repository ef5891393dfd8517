"""What forkpatch writes in the project follows the user's umask, and a write that the
machine refuses part-way (a full disk, a quota, a size limit) names the file.

Every file forkpatch creates (series.yaml, patches/, state files in .forkpatch/, the
work tree's files, dist/'s wheels and SHA256SUMS) gets 0666 less the umask, as the
user's other tools would make it; a file that exists keeps its own mode; a wheel's
members keep their fixed modes. A write cut short by the kernel (here RLIMIT_FSIZE,
which fails the write as a full disk does, with no file name) is reported with the
file's name, exit 1, and leaves no temporary file.
"""

from __future__ import annotations

import os
import resource
import signal
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from forkpatch.example import build_release_wheel, make_fork, write_example_patches
from support.cli import env
from support.projects import leftovers
from support.reliability import Row

UMASKS = (0o077, 0o027, 0o002)
COMMANDS = ("init", "import", "apply", "new", "refresh", "export", "build-wheel")


def _run(cwd: Path, *args: str, umask: int = 0o022, fsize: int | None = None):
    def setup() -> None:
        os.umask(umask)
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run(
        [sys.executable, "-m", "forkpatch", *args],
        cwd=cwd,
        env=env(),
        capture_output=True,
        text=True,
        preexec_fn=setup,
        timeout=300,
    )


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("modes")
    make_fork(root / "fork")
    write_example_patches(root / "fork", "v1.2.1", root / "incoming")
    build_release_wheel(root / "fork", "v1.2.1", root / "release")
    return root


def _written(project: Path) -> dict[str, int]:
    """Every file forkpatch wrote in the project, with its permission bits."""
    out = {}
    for p in project.rglob("*"):
        rel = p.relative_to(project).as_posix()
        if p.is_symlink() or not p.is_file() or "/objects/" in rel or rel.endswith("/lock"):
            continue
        if rel.startswith(".forkpatch/repo.git/") and not rel.endswith(".json"):
            continue  # git's own files: git applies the umask itself
        out[rel] = stat.S_IMODE(p.stat().st_mode)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("umask", UMASKS, ids=[f"{u:03o}" for u in UMASKS])
def test_every_file_forkpatch_writes_follows_the_umask(made, tmp_path, umask):
    project = tmp_path / "project"
    project.mkdir()
    incoming = sorted(str(p) for p in (made / "incoming").glob("*.patch"))
    wheel = next((made / "release").glob("*.whl"))
    steps = [
        ("init", "--fork-url", str(made / "fork"), "--base", "v1.2.1"),
        ("import", *incoming),
        ("apply",),
        ("new", "extra", "-m", "An extra"),
        ("refresh",),
        ("export",),
        ("build-wheel", "--mode", "overlay", "--base-wheel", str(wheel)),
    ]
    for step in steps:
        if step[0] == "refresh":
            (project / ".forkpatch" / "worktree" / "vllm" / "extra.py").write_text("X = 1\n")
        proc = _run(project, *step, umask=umask)
        assert proc.returncode == 0, (step, proc.stderr)
    files = _written(project)
    files.pop(".forkpatch/worktree/vllm/extra.py")  # the test wrote it, not forkpatch
    for must in ("series.yaml", "patches/extra.patch", ".gitignore", ".forkpatch/state.json"):
        assert must in files
    assert any(f.startswith("dist/") and f.endswith(".whl") for f in files)
    assert "dist/SHA256SUMS" in files
    assert ".forkpatch/worktree/vllm/entrypoints/cli/main.py" in files
    wrong = {f: f"{m:03o}" for f, m in files.items() if m & umask or m & 0o600 != 0o600}
    assert wrong == {}, wrong
    # The wheel's members keep their fixed modes, whatever the umask.
    with zipfile.ZipFile(next((project / "dist").glob("*.whl"))) as zf:
        modes = {(i.external_attr >> 16) & 0o777 for i in zf.infolist()}
    assert modes <= {0o644, 0o755}, modes
    # A file that exists keeps its mode.
    patch = project / "patches" / "extra.patch"
    patch.chmod(0o640)
    (project / ".forkpatch" / "worktree" / "vllm" / "extra.py").write_text("X = 2\n")
    assert _run(project, "refresh", umask=umask).returncode == 0
    assert stat.S_IMODE(patch.stat().st_mode) == 0o640


LIMITED = (
    ("refresh", "patches/extra.patch"),
    ("export", "patches/extra.patch"),
)


@pytest.mark.parametrize(("command", "named"), LIMITED)
def test_a_write_the_machine_refuses_names_the_file(made, tmp_path, command, named):
    project = tmp_path / "project"
    project.mkdir()
    incoming = sorted(str(p) for p in (made / "incoming").glob("*.patch"))
    for step in (
        ("init", "--fork-url", str(made / "fork"), "--base", "v1.2.1"),
        ("import", *incoming),
        ("apply",),
        ("new", "extra", "-m", "An extra"),
    ):
        assert _run(project, *step).returncode == 0
    wt = project / ".forkpatch" / "worktree"
    # A big, very compressible file: git's object is small, the patch file is not.
    (wt / "vllm" / "big.py").write_text("X = 1\n" * 60_000)
    if command == "export":
        git_env = {**env(), "GIT_DIR": str(wt / ".git")}
        subprocess.run(["git", "-C", str(wt), "add", "-A"], check=True, env=git_env)
        subprocess.run(["git", "-C", str(wt), "commit", "-q", "--amend", "--no-edit"], env=git_env)
    before = (project / "patches" / "extra.patch").read_bytes()
    proc = _run(project, command, fsize=200_000)
    assert proc.returncode == 1, proc.stderr
    assert f"{project / named}:" in proc.stderr, proc.stderr
    assert "a file:" not in proc.stderr and "internal error" not in proc.stderr
    assert "tip:" in proc.stderr
    assert (project / "patches" / "extra.patch").read_bytes() == before
    assert leftovers(project) == []


RELIABILITY = [
    Row(
        "the user's environment",
        "umask 077, 027 and 002 over init, import, apply, new, refresh, export, build-wheel",
        f"{len(UMASKS)} umasks x {len(COMMANDS)} commands",
        "every file forkpatch creates in the project has 0666 less the umask; an existing "
        "file keeps its mode; wheel members keep their fixed modes",
    ),
    Row(
        "the user's environment",
        "a write the machine refuses part-way (the write fails as on a full disk)",
        f"{len(LIMITED)} commands",
        "exit 1 naming the file being written and what to do; the old file intact, "
        "no temporary file left",
    ),
]
