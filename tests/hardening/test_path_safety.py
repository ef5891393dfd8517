"""Patches that try to write outside the fork tree are refused before anything is written.

One test per vector. Each runs `forkpatch import` (and, with the patch put in by hand,
`forkpatch apply`) and checks: exit 1, a message naming the patch and the path, and no
change to series.yaml, patches/, the work tree or anything outside the project.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from forkpatch.example import make_fork
from support.cli import fp_in
from support.projects import visible
from support.reliability import Row


def _diff(path: str, body: str = "+pwned\n", *, header: str = "") -> str:
    return (
        f"{header}diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n"
        f"+++ b/{path}\n@@ -0,0 +1 @@\n{body}"
    )


def _symlink(path: str, target: str) -> str:
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 120000\n--- /dev/null\n"
        f"+++ b/{path}\n@@ -0,0 +1 @@\n+{target}\n\\ No newline at end of file\n"
    )


VECTORS: dict[str, list[str]] = {
    "absolute path": [_diff("/tmp/forkpatch-hardening-abs.txt").replace("a//", "a/")],
    "absolute path (plain diff)": [
        ("--- /dev/null\n+++ /tmp/forkpatch-hardening-abs2.txt\n@@ -0,0 +1 @@\n+pwned\n")
    ],
    "dot-dot": [_diff("../outside.txt")],
    "dot-dot in the middle": [_diff("vllm/../../outside.txt")],
    "dot-dot in a rename": [
        (
            "diff --git a/vllm/version.py b/../stolen.py\n"
            "similarity index 100%\n"
            "rename from vllm/version.py\nrename to ../stolen.py\n"
        )
    ],
    ".git internals": [_diff(".git/hooks/post-checkout")],
    "nested .git": [_diff("vllm/.git/config")],
    ".git case-folded": [_diff(".GIT/hooks/pre-commit")],
    ".git with a trailing dot (Windows)": [_diff(".git./config")],
    ".git 8.3 short name": [_diff("GIT~1/config")],
    ".git with an HFS+ ignorable code point": [_diff(".g\u200cit/config")],
    "backslash": [_diff("vllm\\..\\..\\outside.txt")],
    "drive letter": [_diff("C:/outside.txt")],
    "symlink created by an earlier patch": [
        _symlink("vllm/escape", "../.."),
        _diff("vllm/escape/outside.txt"),
    ],
    "symlink to .git created by an earlier patch": [
        _symlink("gitlink", ".git"),
        _diff("gitlink/hooks/post-checkout"),
    ],
    "symlink and write through it in one patch": [
        _symlink("vllm/esc", "/tmp") + _diff("vllm/esc/forkpatch-hardening.txt")
    ],
    "symlink case-folding (Link vs link)": [
        _symlink("vllm/Link", "../.."),
        _diff("vllm/link/outside.txt"),
    ],
}


@pytest.fixture(scope="module")
def fork(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pathsafety")
    make_fork(root / "fork")
    return root / "fork"


@pytest.fixture
def project(fork: Path, tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    code, _, err = fp_in(project, "init", "--fork-url", str(fork), "--base", "v1.2.1")
    assert code == 0, err
    return project


def _outside(tmp_path: Path) -> set[str]:
    return {str(p) for p in tmp_path.parent.rglob("*outside*")} | {
        str(p) for p in Path("/tmp").glob("forkpatch-hardening*")
    }


@pytest.mark.parametrize("vector", sorted(VECTORS))
def test_vector_is_refused_on_import(project: Path, tmp_path: Path, vector: str) -> None:
    patches = VECTORS[vector]
    before_outside = _outside(tmp_path)
    files = []
    for i, text in enumerate(patches):
        f = tmp_path / f"{i:02d}-p{i}.diff"
        f.write_text(f"Vector {vector}.\n\n{text}", encoding="utf-8")
        files.append(f)
    # Earlier patches (a symlink) may go in; the one that writes through them may not.
    for f in files[:-1]:
        code, _, err = fp_in(project, "import", "--name", f"p{files.index(f)}", str(f))
        assert code == 0, err
    before = visible(project)
    code, _, err = fp_in(project, "import", "--name", "evil", str(files[-1]))
    assert code == 1, err
    assert "unsafe path" in err or "symlink" in err, err
    assert "Traceback" not in err
    assert visible(project) == before
    assert _outside(tmp_path) == before_outside


@pytest.mark.parametrize("vector", sorted(VECTORS))
def test_vector_is_refused_on_apply(project: Path, tmp_path: Path, vector: str) -> None:
    """The same patch put into patches/ and series.yaml by hand: apply refuses it, and
    no work tree is created."""
    patches = VECTORS[vector]
    series = (project / "series.yaml").read_text().replace("patches: []\n", "patches:\n")
    for i, text in enumerate(patches):
        (project / "patches" / f"p{i}.patch").write_text(f"Vector.\n\n{text}")
        series += f"  - name: p{i}\n    file: p{i}.patch\n    summary: vector {i}\n"
    (project / "series.yaml").write_text(series)
    before = visible(project)
    before_outside = _outside(tmp_path)
    code, _, err = fp_in(project, "apply")
    assert code == 1, err
    assert "unsafe path" in err or "symlink" in err, err
    assert visible(project) == before
    assert not (project / ".forkpatch" / "worktree").exists()
    assert _outside(tmp_path) == before_outside
    code, _, err = fp_in(project, "status")
    assert code == 1 and ("unsafe path" in err or "symlink" in err), err


SERIES_FILES = [
    "../../etc/passwd",
    "/etc/passwd",
    "sub/../../x.patch",
    "C:/x.patch",
    "a\\..\\..\\x.patch",
]
BAD_NAMES = ["../evil", "/abs", ".git", "Upper", "a/b"]


@pytest.mark.parametrize("file", SERIES_FILES)
def test_series_file_outside_patches_is_refused(project: Path, file: str) -> None:
    series = (project / "series.yaml").read_text().replace("patches: []\n", "patches:\n")
    series += f"  - name: p\n    file: '{file}'\n    summary: s\n"
    (project / "series.yaml").write_text(series)
    code, _, err = fp_in(project, "status")
    assert code == 1 and "must be a relative path inside patches/" in err, err


@pytest.mark.parametrize("name", BAD_NAMES)
def test_new_patch_names_cannot_escape(project: Path, name: str) -> None:
    code, _, err = fp_in(project, "apply")
    assert code == 0, err
    before = visible(project)
    code, _, err = fp_in(project, "new", name)
    assert code == 2 and "not a valid patch name" in err, err
    assert visible(project) == before


def test_symlinked_patch_file_is_replaced_not_written_through(
    project: Path, tmp_path: Path
) -> None:
    """patches/x.patch as a symlink to a file outside: refresh replaces the link itself."""
    code, _, err = fp_in(project, "apply")
    assert code == 0, err
    code, _, err = fp_in(project, "new", "x")
    assert code == 0, err
    target = tmp_path / "outside-target.patch"
    target.write_text("do not touch\n")
    link = project / "patches" / "x.patch"
    link.unlink()
    link.symlink_to(target)
    (project / ".forkpatch" / "worktree" / "vllm" / "new.py").write_text("x = 1\n")
    # The link's content is a change made outside forkpatch: refused, nothing written...
    code, _, err = fp_in(project, "refresh")
    assert code == 1 and "patches/x.patch was modified outside forkpatch" in err, err
    assert target.read_text() == "do not touch\n" and link.is_symlink()
    # ...and with --force (the work tree's version wins) the link is replaced, not followed.
    code, _, err = fp_in(project, "refresh", "--force")
    assert code == 0, err
    assert target.read_text() == "do not touch\n"
    assert not link.is_symlink() and b"vllm/new.py" in link.read_bytes()


RELIABILITY = [
    Row(
        "path safety",
        "escape vectors in patches (absolute, .., .git spellings, symlinks, backslashes, "
        "drive letters)",
        f"{len(VECTORS)} vectors x (import, apply)",
        "refused before anything is written",
        refused=str(2 * len(VECTORS)),
        outside=f"nothing (checked in {2 * len(VECTORS)})",
    ),
    Row(
        "path safety",
        "series.yaml naming a patch file outside patches/; bad patch names",
        f"{len(SERIES_FILES) + len(BAD_NAMES)} cases",
        "refused; nothing changed",
        refused=str(len(SERIES_FILES) + len(BAD_NAMES)),
    ),
    Row(
        "path safety",
        "patches/x.patch a symlink to a file outside",
        "1 case",
        "refresh replaces the link",
        outside="nothing: the link's target untouched",
    ),
]
