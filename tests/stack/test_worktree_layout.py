"""The work tree's files: sparse work trees, and files git cannot check out honestly.

- `apply --sparse` holds the root files and the directories the series touches; it
  grows when a pushed patch or a new file needs another directory; `--full` makes it
  whole again; the choice is kept by a plain `apply`.
- A *phantom* file (a blob whose content does not hash to its id: the fork fixture's
  placeholder blobs under docs/) must not show as a change: not in `git status`, not
  as "uncommitted changes" on export, not as a change of id in a patch commit.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

from support.git import git, numbered
from support.projects import copy_example, scratch_project, snapshot

ONLINE = "vllm/model_executor/layers/quantization/online"


def _files(wt: Path) -> set[str]:
    return set(git(wt, "ls-files", "-t").splitlines())


def _checked_out(wt: Path) -> set[str]:
    return {
        str(p.relative_to(wt))
        for p in wt.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(wt).parts and p.name != ".git"
    }


def test_sparse_apply_holds_the_touched_directories(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    before = snapshot(ex.project)
    _, out, _ = ex.run("apply", "--sparse")
    assert "sparse" in out
    wt = ex.wt
    present = _checked_out(wt)
    all_files = set(git(wt, "ls-files").splitlines())
    assert f"{ONLINE}/base.py" in present and "vllm/utils/deep_gemm.py" in present
    assert "vllm/entrypoints/cli/main.py" in present and "setup.py" in present
    # Files of parents come along (cone mode); other directories do not.
    assert "vllm/__init__.py" in present and "vllm/version.py" in present
    assert "csrc/ops.cu" not in present and "vllm/platforms/__init__.py" not in present
    assert present < all_files
    assert git(wt, "status", "--porcelain") == ""
    # The stack works as in a full tree.
    ex.run("pop", "--all")
    ex.run("push", "--all")
    ex.run("edit", "odd-width-padding")
    f = wt / ONLINE / "fp8.py"
    f.write_text(f.read_text() + "# sparse edit\n")
    ex.run("refresh")
    assert "+# sparse edit" in (ex.project / "patches" / "odd-width-padding.patch").read_text()
    # A new patch adding a file in a directory the tree does not hold yet.
    ex.run("new", "platform-note")
    note = wt / "vllm" / "platforms" / "note.py"
    note.parent.mkdir(parents=True, exist_ok=True)
    note.write_text("NOTE = 1\n")
    ex.run("refresh")
    text = (ex.project / "patches" / "platform-note.patch").read_text()
    assert "+++ b/vllm/platforms/note.py" in text
    assert "vllm/platforms/__init__.py" in _checked_out(wt)  # the directory came in
    assert git(wt, "status", "--porcelain") == ""
    # A plain apply keeps it sparse; --full makes it whole.
    ex.run("export")
    ex.run("apply")
    assert "csrc/ops.cu" not in _checked_out(wt)
    _, out, _ = ex.run("apply", "--full")
    assert "full" in out
    assert _checked_out(wt) == set(git(wt, "ls-files").splitlines())
    assert git(wt, "status", "--porcelain") == ""
    ex.run("apply", "--sparse")
    assert "csrc/ops.cu" not in _checked_out(wt)
    changed = {k for k, v in snapshot(ex.project).items() if before.get(k) != v}
    assert changed == {
        "series.yaml",
        "patches/odd-width-padding.patch",
        "patches/platform-note.patch",
    }


def test_sparse_push_brings_in_the_directories_of_the_pushed_patch(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    ex.run("apply", "--sparse")
    assert "vllm/platforms/__init__.py" not in _checked_out(ex.wt)
    plain = tmp_path / "extra.diff"
    plain.write_text("--- /dev/null\n+++ b/vllm/platforms/extra.py\n@@ -0,0 +1 @@\n+EXTRA = 1\n")
    ex.run("import", "--name", "platforms-extra", str(plain))
    ex.run("push")
    present = _checked_out(ex.wt)
    assert "vllm/platforms/extra.py" in present and "vllm/platforms/__init__.py" in present
    assert git(ex.wt, "status", "--porcelain") == ""


# --------------------------------------------------------------------------- phantom files


def _lie_about(repo: Path, rel: str, content: bytes) -> str:
    """Make the loose blob of ``rel`` at HEAD hold ``content`` under its old id (what the
    fixture's placeholder blobs are)."""
    oid = git(repo, "rev-parse", f"HEAD:{rel}")
    path = repo / ".git" / "objects" / oid[:2] / oid[2:]
    path.chmod(0o644)
    path.write_bytes(zlib.compress(b"blob %d\0" % len(content) + content))
    return oid


def _phantom_project(tmp_path, capsys):
    files = {"src/a.txt": numbered(20), "docs/big.html": "<html>the real page</html>\n"}
    fork, project, run = scratch_project(tmp_path, capsys, files)
    _lie_about(fork.path, "docs/big.html", b"placeholder: absent from this snapshot\n")
    assert git(fork.path, "cat-file", "-p", "v1:docs/big.html").startswith("placeholder")
    run("apply")
    wt = project / ".forkpatch" / "worktree"
    run("new", "fix")
    (wt / "src" / "a.txt").write_text(numbered(20).replace("line 4\n", "LINE 4\n"))
    run("refresh")
    return project, run, wt


def _touch(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 5_000_000_000))


def test_phantom_file_never_shows_as_a_change(tmp_path, capsys):
    project, run, wt = _phantom_project(tmp_path, capsys)
    assert git(wt, "status", "--porcelain") == ""
    phantom = wt / "docs" / "big.html"
    if phantom.exists():
        _touch(phantom)  # git rehashes it now: another id, "modified"
        assert git(wt, "status", "--porcelain") == "M docs/big.html"
    before = snapshot(project)
    _, _, err = run("export")
    assert "uncommitted changes" not in err
    assert snapshot(project) == before
    assert git(wt, "status", "--porcelain") == ""
    for command in (["pop"], ["push"], ["apply", "--force"], ["pop", "--all"], ["push", "--all"]):
        run(*command)
        assert git(wt, "status", "--porcelain") == "", command
    # The patch commit and the patch hold only the real change.
    run("edit", "fix")
    (wt / "src" / "a.txt").write_text(numbered(20).replace("line 5\n", "LINE 5\n"))
    run("refresh")
    assert git(wt, "diff-tree", "-r", "--name-only", "HEAD~1", "HEAD").split() == ["src/a.txt"]
    assert "docs" not in (project / "patches" / "fix.patch").read_text()


def test_phantom_file_is_reported_once_and_left_out(tmp_path, capsys):
    files = {"src/a.txt": numbered(20), "docs/big.html": "<html>the real page</html>\n"}
    fork, project, run = scratch_project(tmp_path, capsys, files)
    _lie_about(fork.path, "docs/big.html", b"placeholder\n")
    wt = project / ".forkpatch" / "worktree"
    messages = []
    _, _, err = run("apply")
    messages.append(err)
    phantom = wt / "docs" / "big.html"
    if phantom.exists():  # git did not rehash it yet: it will once its stat changes
        _touch(phantom)
    for command in (["new", "x"], ["pop"], ["push"], ["apply", "--force"]):
        _, _, err = run(*command)
        messages.append(err)
    said = [m for m in messages if "left 1 file(s) out of the work tree" in m]
    assert len(said) == 1 and "docs/big.html" in said[0], messages
    assert not phantom.exists()
    assert "S docs/big.html" in _files(wt)
    assert git(wt, "status", "--porcelain") == ""
