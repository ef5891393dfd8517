"""File modes: a patch changes a mode only where it says so.

An ``index`` line's mode records the author's tree (a checkout with
``core.fileMode=false`` writes 100644 for an executable file); like ``git apply``,
forkpatch keeps the tree's mode then and says so. ``old mode``/``new mode`` and
``new file mode`` lines are changes and apply. The result must be what ``git apply``
gives on the same tree.
"""

from __future__ import annotations

import pytest

from support.cli import fp_in
from support.git import ScratchRepo, git, numbered

BODY = numbered(12)


def _hunk(path: str) -> str:
    return f"--- a/{path}\n+++ b/{path}\n@@ -1,3 +1,3 @@\n-line 1\n+LINE 1\n line 2\n line 3\n"


CASES = {
    # name: (fork mode of tool.sh, patch text, mode expected after, warned)
    "index-644-on-755": (
        0o755,
        "diff --git a/tool.sh b/tool.sh\nindex 1111111..2222222 100644\n" + _hunk("tool.sh"),
        "100755",
        True,
    ),
    "index-755-on-644": (
        0o644,
        "diff --git a/tool.sh b/tool.sh\nindex 1111111..2222222 100755\n" + _hunk("tool.sh"),
        "100644",
        True,
    ),
    "explicit-mode-change-with-hunk": (
        0o755,
        "diff --git a/tool.sh b/tool.sh\nold mode 100755\nnew mode 100644\n"
        "index 1111111..2222222\n" + _hunk("tool.sh"),
        "100644",
        False,
    ),
    "explicit-mode-change-only": (
        0o644,
        "diff --git a/tool.sh b/tool.sh\nold mode 100644\nnew mode 100755\n",
        "100755",
        False,
    ),
    "plain-diff-on-755": (0o755, _hunk("tool.sh"), "100755", False),
    "index-matching-755": (
        0o755,
        "diff --git a/tool.sh b/tool.sh\nindex 1111111..2222222 100755\n" + _hunk("tool.sh"),
        "100755",
        False,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_mode_after_apply_matches_git_apply(tmp_path, case):
    mode, diff, want, warned = CASES[case]
    fork = ScratchRepo(tmp_path / "fork")
    fork.add_file("tool.sh", BODY, mode=mode)
    fork.commit("base")
    fork.tag("v1")
    # git apply on the same tree: the reference.
    ref = tmp_path / "ref"
    git(tmp_path, "clone", "-q", str(fork.path), str(ref))
    (tmp_path / "p.diff").write_text(diff)
    git(ref, "apply", str(tmp_path / "p.diff"))
    git(ref, "add", "-A")
    assert git(ref, "ls-files", "-s", "tool.sh").split()[0] == want

    project = tmp_path / "project"
    project.mkdir()
    code, _, err = fp_in(project, "init", "--fork-url", str(fork.path), "--base", "v1")
    assert code == 0, err
    (project / "patches" / "p.patch").write_text("Patch p.\n\n" + diff)
    series = (project / "series.yaml").read_text().replace("patches: []\n", "patches:\n")
    (project / "series.yaml").write_text(
        series + "  - name: p\n    file: p.patch\n    summary: p\n"
    )
    code, out, err = fp_in(project, "status")
    assert code == 0, err
    assert ("index line says mode" in out + err) == warned, out + err
    code, _, err = fp_in(project, "apply")
    assert code == 0, err
    wt = project / ".forkpatch" / "worktree"
    assert git(wt, "ls-tree", "HEAD", "tool.sh").split()[0] == want
    assert git(wt, "status", "--porcelain") == ""
    # Exporting gives a patch that git apply takes to the same tree; no mode line is
    # invented where the mode did not change.
    code, _, err = fp_in(project, "export")
    assert code == 0, err
    text = (project / "patches" / "p.patch").read_text()
    assert ("new mode" in text) == (mode != int(want, 8) & 0o777), text
