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


@pytest.mark.parametrize(
    "said",
    [
        # one file after the other (a git before parallel checkout, or under its threshold)
        (
            "error: unable to read sha1 file of docs/pic.png ({a})\n"
            "error: unable to read sha1 file of docs/a b.html ({b})\n"
        ),
        # a parallel checkout's workers (checkout.workers, which forkpatch's git runs with)
        "error: cannot read object {a} 'docs/pic.png'\nerror: cannot read object {b} 'docs/a b.html'\n",
    ],
    ids=["sequential", "parallel"],
)
def test_either_checkout_names_the_files_it_could_not_write(said):
    from forkpatch.errors import ForkRepoError, GitError
    from forkpatch.stack.worktree import objects_named

    a, b = "3d9f96d26b98f1b6512bbf043d79dc6901aba26e", "c53bee9cca91a1b2672c43a49ebe4fb926a3ff30"
    message = said.format(a=a, b=b) + "fatal: Could not reset index file to revision 'HEAD'.\n"
    with pytest.raises(ForkRepoError) as got, objects_named():
        raise GitError(message)
    text = got.value.message
    assert "lacks the content of 2 file(s)" in text
    assert f"docs/pic.png ({a[:12]})" in text and f"docs/a b.html ({b[:12]})" in text


def test_another_git_failure_is_left_as_it_is():
    from forkpatch.errors import GitError
    from forkpatch.stack.worktree import objects_named

    with pytest.raises(GitError, match=r"index\.lock"), objects_named():
        raise GitError("fatal: Unable to create '.git/index.lock': File exists.")
