"""The repository's own series is in forkpatch's canonical form, on the real fork.

Each shipped patch file is exactly what forkpatch writes for its commit (the
description, then git's diff without `index` lines for text files), and right
after `forkpatch apply`, `export` (and `export --offsets`) change zero bytes.
A shipped file that carried `index` lines made the first `edit`, `rename` or
`rebase` of a new user refuse for "changes that are not written to patches/"
while `status` said every patch was clean. Whatever the series holds (patches
are edited by others), this reads it as it is.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from forkpatch.engine import canonical_diff
from forkpatch.git import DIFF_OPTIONS
from forkpatch.patchfile import format_patch
from forkpatch.trailer import parse_commit_message
from support import realfork
from support.cli import Runner
from support.projects import snapshot

pytestmark = pytest.mark.real_fork


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy2(realfork.REPO_ROOT / "series.yaml", project / "series.yaml")
    shutil.copytree(realfork.REPO_ROOT / "patches", project / "patches")
    return project


def _git(wt: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(wt), *args], check=True, capture_output=True, text=True
    ).stdout


def _not_canonical(project: Path) -> list[str]:
    """Patch files (after `apply`) that differ from forkpatch's canonical form for
    their commit in the work tree."""
    wt = project / ".forkpatch" / "worktree"
    base = yaml.safe_load((project / "series.yaml").read_text())["base"]["commit"]
    files = {
        p["name"]: project / "patches" / p["file"]
        for p in yaml.safe_load((project / "series.yaml").read_text())["patches"]
        if "file" in p
    }
    out = []
    for commit in _git(wt, "rev-list", "--reverse", "--first-parent", f"{base}..HEAD").split():
        message = _git(wt, "show", "-s", "--format=%B", commit)
        name, _summary, header = parse_commit_message(message)
        if name not in files:
            continue
        raw = subprocess.run(
            ["git", "-C", str(wt), "diff-tree", *DIFF_OPTIONS, f"{commit}^", commit],
            check=True,
            capture_output=True,
        ).stdout
        if files[name].read_bytes() != format_patch(header, canonical_diff(raw)):
            out.append(name)
    return out


@pytest.mark.parametrize("layout", ["--full", "--sparse"])
def test_apply_then_export_changes_zero_bytes(tmp_path, capsys, layout):
    fork = realfork.fork_or_skip()
    realfork.tags_or_skip(realfork.BASE_TAG)
    project = _project(tmp_path)
    run = Runner(project, capsys)
    pre = ["--fork-repo", fork]
    before = snapshot(project)
    _, out, _ = run(*pre, "status", "--json")
    assert {p["status"] for p in json.loads(out)["patches"]} == {"clean"}
    run(*pre, "apply", layout)
    assert _not_canonical(project) == []
    wt = project / ".forkpatch" / "worktree"
    # The fixture's placeholder blobs do not show as changes.
    assert _git(wt, "status", "--porcelain") == ""
    _, out, err = run(*pre, "export")
    assert "uncommitted" not in err and "0 patch file(s) changed" in out
    assert snapshot(project) == before
    run(*pre, "export", "--offsets")
    assert snapshot(project) == before
    # What used to be refused right after apply.
    run(*pre, "edit", "odd-width-padding")
    run(*pre, "refresh")
    run(*pre, "pop", "--all")
    run(*pre, "push", "--all")
    assert snapshot(project) == before
    if layout == "--sparse":
        files = [ln for ln in _git(wt, "ls-files", "-t").splitlines() if ln.startswith("H ")]
        assert len(files) < 1500, len(files)  # of ~5,600


def test_the_guard_catches_a_non_canonical_patch(tmp_path, capsys):
    """The same check on a copy whose patch carries an `index` line (what the shipped
    files had): the guard names it, so it can fail."""
    fork = realfork.fork_or_skip()
    realfork.tags_or_skip(realfork.BASE_TAG)
    project = _project(tmp_path)
    patch = project / "patches" / "cli-version.patch"
    text = patch.read_text()
    first = text.index("diff --git ")
    end = text.index("\n", first) + 1
    patch.write_text(text[:end] + "index 0123456..89abcde 100644\n" + text[end:])
    run = Runner(project, capsys)
    run("--fork-repo", fork, "apply")
    assert _not_canonical(project) == ["cli-version"]
