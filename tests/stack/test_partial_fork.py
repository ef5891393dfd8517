"""A fork repository that lacks some blobs (a partial snapshot of the fork).

Some public snapshots of the fork leave out a few large files' objects. A full work
tree cannot be checked out from one: git says "unable to read sha1 file" and
stops. forkpatch names the files it could not write and the ways out (a sparse work
tree, which leaves them out; a complete clone of the fork), whether the work tree is
being made or made whole again (`apply --full`).
"""

from __future__ import annotations

import pytest

from support.cli import Runner
from support.git import ScratchRepo

MISSING_SETS = {
    "one": ["docs/pic.png"],
    "two": ["docs/pic.png", "docs/assets/timeline.html"],
    "nested": ["docs/assets/design/arch.png"],
}


def _partial_fork(tmp_path, missing):
    fork = ScratchRepo(tmp_path / "fork")
    fork.add_file("src/a.py", "x = 1\n")
    for rel in missing:
        fork.add_file(rel, f"large content of {rel}\n")
    fork.commit("base")
    fork.tag("v1")
    for rel in missing:
        oid = fork.rev(f"HEAD:{rel}")
        (fork.path / ".git" / "objects" / oid[:2] / oid[2:]).unlink()
    return fork


@pytest.mark.parametrize("which", sorted(MISSING_SETS))
def test_a_full_apply_names_the_missing_files_and_the_ways_out(tmp_path, capsys, which):
    missing = MISSING_SETS[which]
    fork = _partial_fork(tmp_path, missing)
    project = tmp_path / "project"
    project.mkdir()
    run = Runner(project, capsys)
    run("init", "--fork-url", str(fork.path), "--base", "v1")
    (project / "patches" / "a.patch").write_text(
        "A change.\n\ndiff --git a/src/a.py b/src/a.py\n--- a/src/a.py\n+++ b/src/a.py\n"
        "@@ -1 +1 @@\n-x = 1\n+x = 2\n"
    )
    series = project / "series.yaml"
    series.write_text(
        series.read_text().replace(
            "patches: []\n", "patches:\n  - name: a\n    file: a.patch\n    summary: a\n"
        )
    )
    _, _, err = run("apply", expect=1)
    assert "sha1 file" not in err.split("tip:")[0] or "lacks the content" in err
    assert "lacks the content of" in err
    for rel in missing:
        assert rel in err
    assert "`forkpatch apply --sparse`" in err and "complete clone" in err
    assert "Traceback" not in err and "internal error" not in err
    # The first way out works; the half-made work tree is made again.
    run("apply", "--sparse")
    wt = project / ".forkpatch" / "worktree"
    assert (wt / "src" / "a.py").read_text() == "x = 2\n"
    # Made whole again: the same message, and the sparse work tree still works.
    _, _, err = run("apply", "--full", expect=1)
    assert "lacks the content of" in err and missing[0] in err
    run("status")
