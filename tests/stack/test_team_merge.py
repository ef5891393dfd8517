"""`push --merge` of a teammate's version of a patch that came in by `git pull`.

Two clones of one project repository (a bare remote): the teammate changes a patch
above another that this side changes; after the pull the teammate's patch no longer
applies to this stack, and `push --merge` must merge it 3-way on the files it was made
on (found from the project's history, or from the images this side saved), keeping
both changes and the entry's summary. It used to say "no merge base for a 3-way
merge" (fresh clone) or merge this side's old version of the patch instead of the
teammate's (saved images).
"""

from __future__ import annotations

import pytest

from support.cli import Runner
from support.git import git
from support.projects import copy_example

FP8 = "vllm/model_executor/layers/quantization/online/fp8.py"
COMMENT = "        # Pick a generic FP8 kernel for this GPU.\n"
KERNEL = '        layer.kernel = "generic"\n'


def _edit(path, old, new):
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


@pytest.fixture
def team(tmp_path, capsys):
    """The example project with `kernel-pick` (fp8.py, near odd-width-padding's hunk) on
    top, as a repository on a bare remote, and two clones: mine and the teammate's."""
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    ex.run("new", "kernel-pick", "-m", "Pick the SM70 kernel")
    _edit(ex.wt / FP8, COMMENT, "        # Pick the kernel for this GPU.\n")
    ex.run("refresh")
    git(ex.project, "init", "-q", "-b", "main")
    git(ex.project, "add", "series.yaml", "patches", ".gitignore")
    git(ex.project, "commit", "-q", "-m", "the series")
    remote = tmp_path / "team.git"
    git(tmp_path, "clone", "-q", "--bare", str(ex.project), str(remote))
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    for c in (mine, theirs):
        git(tmp_path, "clone", "-q", str(remote), str(c))
    return Runner(mine, capsys), Runner(theirs, capsys)


def _teammate_changes_kernel_pick(run):
    run("apply")
    wt = run.cwd / ".forkpatch" / "worktree"
    _edit(wt / FP8, KERNEL, '        layer.kernel = "sm70"\n')
    run("refresh")
    git(run.cwd, "commit", "-q", "-a", "-m", "kernel-pick: the sm70 kernel")
    git(run.cwd, "push", "-q", "origin", "main")


def _i_change_the_patch_below(run, *, keep_stack: bool):
    """odd-width-padding changed on a line kernel-pick's hunk has as context."""
    run("apply")
    wt = run.cwd / ".forkpatch" / "worktree"
    run("pop", "odd-width-padding")
    _edit(
        wt / FP8, "        self.init_kernel(layer)\n", "        self.init_kernel(layer)  # padded\n"
    )
    run("refresh")
    git(run.cwd, "commit", "-q", "-a", "-m", "odd-width-padding: a note")
    if not keep_stack:
        run("pop", "--all")


@pytest.mark.parametrize("how", ["saved-images", "fresh-apply", "fresh-clone"])
def test_push_merge_merges_a_pulled_teammate_version(team, tmp_path, capsys, how):
    mine, theirs = team
    _teammate_changes_kernel_pick(theirs)
    _i_change_the_patch_below(mine, keep_stack=True)
    git(mine.cwd, "pull", "-q", "--no-rebase", "--no-edit")
    summary = "Pick the SM70 kernel"
    if how == "fresh-clone":
        git(mine.cwd, "push", "-q", "origin", "main")
        third = tmp_path / "third"
        git(tmp_path, "clone", "-q", str(tmp_path / "team.git"), str(third))
        mine = Runner(third, capsys)
        _, _, err = mine("apply", expect=3)
    elif how == "fresh-apply":
        _, _, err = mine("apply", "--force", expect=3)
    else:
        _, _, err = mine("push", "--all", expect=3)
    assert "kernel-pick" in err
    _, _, err = mine("push", "--merge", "--all")
    assert "no merge base" not in err
    wt = mine.cwd / ".forkpatch" / "worktree"
    text = (wt / FP8).read_text()
    assert "self.init_kernel(layer)  # padded" in text  # mine
    assert 'layer.kernel = "sm70"' in text  # the teammate's
    assert "# Pick the kernel for this GPU." in text
    assert "<<<<<<<" not in text
    mine("export")
    series = (mine.cwd / "series.yaml").read_text()
    assert f"summary: {summary}" in series
    patch = (mine.cwd / "patches" / "kernel-pick.patch").read_text()
    assert '+        layer.kernel = "sm70"' in patch
    mine("status")
