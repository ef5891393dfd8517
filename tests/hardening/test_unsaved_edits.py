"""Uncommitted edits in the editing work tree are never lost, whatever the command.

An edit that is in no object (``git status`` of ``.forkpatch/worktree``: a file
modified, deleted, or new and not ignored) is refused by every command that would
rewrite the work tree, with a message naming each file and each way out; a
command that leaves the work tree as it is (``new``, ``rebase --abort`` at a stop)
keeps the edit and says where it goes. Afterwards the edit is still there, byte
for byte, and a refused command changed nothing in series.yaml or patches/.

Inside a stopped rebase, the conflict work tree (``.forkpatch/rebase-worktree``)
is the resolution: ``--continue`` takes all of it, a file the patch did not touch
included, and names that file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from support.git import git
from support.projects import Example, copy_example, load, snapshot
from support.reliability import Row

EDITED = "vllm/__init__.py"  # tracked: the example patches do not touch it
NEW = "notes/todo.txt"  # untracked, not ignored by the fork


def _import_file(ex: Example) -> list[str]:
    """A patch that applies anywhere (a new file), to import among the applied ones."""
    path = ex.root / "extra.patch"
    path.write_text(
        "Add a helper.\n\n"
        "diff --git a/vllm/extra_helper.py b/vllm/extra_helper.py\n"
        "new file mode 100644\n"
        "--- /dev/null\n"
        "+++ b/vllm/extra_helper.py\n"
        "@@ -0,0 +1 @@\n"
        "+HELPER = 1\n"
    )
    return ["import", "--after", "capability-floor", str(path)]


def _stopped_rebase(ex: Example) -> None:
    """A rebase stopped at odd-width-padding (exact context only), whose conflict work
    tree brings the patch in cleanly: `--continue` and `--skip` go through to the end,
    which rebuilds the editing stack on v1.3.0."""
    ex.run("rebase", "--onto", "v1.3.0", "--no-3way", expect=3)


@dataclass(frozen=True)
class Case:
    args: Callable[[Example], list[str]]
    before: Callable[[Example], None] = lambda ex: None
    refused: bool = True  # else: the command goes on and the edit stays where it is
    says: tuple[str, ...] = field(default=())  # words the message must hold besides the files


CASES: dict[str, Case] = {
    "apply": Case(lambda ex: ["apply"], says=("--force",)),
    "edit": Case(lambda ex: ["edit", "capability-floor"], says=("forkpatch refresh",)),
    "push": Case(lambda ex: ["push"], before=lambda ex: ex.run("pop")),
    "push --all": Case(lambda ex: ["push", "--all"], before=lambda ex: ex.run("pop", "--all")),
    "pop": Case(lambda ex: ["pop"], says=("--force",)),
    "pop --all": Case(lambda ex: ["pop", "--all"]),
    "move": Case(lambda ex: ["move", "cli-version", "--before", "eager-block-cast"]),
    "rename": Case(lambda ex: ["rename", "cli-version", "cli-version-2"]),
    "delete": Case(lambda ex: ["delete", "cli-version"]),
    "import": Case(_import_file),
    "new": Case(lambda ex: ["new", "my-fix"], refused=False, says=("'my-fix'",)),
    "rebase --onto": Case(lambda ex: ["rebase", "--onto", "v1.3.0"]),
    "rebase --continue": Case(
        lambda ex: ["rebase", "--continue"], before=_stopped_rebase, says=("rebase --abort",)
    ),
    "rebase --skip": Case(
        lambda ex: ["rebase", "--skip"], before=_stopped_rebase, says=("rebase --abort",)
    ),
    "rebase --abort": Case(
        lambda ex: ["rebase", "--abort"], before=_stopped_rebase, refused=False, says=("kept",)
    ),
}

RELIABILITY = [
    Row(
        "uncommitted edits",
        "an edit in the editing work tree that is in no object (a tracked file modified, "
        "a new file), then a command that rewrites the work tree: "
        + ", ".join(f"`{c}`" for c in CASES),
        f"{len(CASES)} commands",
        "every command that would rewrite the work tree refuses before changing anything, "
        "naming each file and each way out (refresh, stash, --force or a git discard; in a "
        "stopped rebase: --abort keeps them); `new` and `rebase --abort` keep the edit in "
        "place and say so; the edit is there afterwards byte for byte",
        refused=f"{sum(c.refused for c in CASES.values())}/{len(CASES)}",
    ),
    Row(
        "uncommitted edits",
        "a stopped rebase resolved with an edit to a file the conflicting patch did not touch",
        "1 case",
        "`rebase --continue` takes the whole conflict work tree as the resolution and names "
        "the file the patch now also changes",
    ),
]


def _edit(ex: Example) -> dict[str, bytes]:
    (ex.wt / EDITED).write_bytes(b"# my edit, not refreshed yet\n")
    (ex.wt / NEW).parent.mkdir(exist_ok=True)
    (ex.wt / NEW).write_bytes(b"remember the padding\n")
    return {EDITED: (ex.wt / EDITED).read_bytes(), NEW: (ex.wt / NEW).read_bytes()}


@pytest.mark.parametrize("command", list(CASES))
def test_an_uncommitted_edit_is_never_lost(tmp_path, capsys, command):
    case = CASES[command]
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    case.before(ex)
    args = case.args(ex)
    edits = _edit(ex)
    owned = snapshot(ex.project)
    head = git(ex.wt, "rev-parse", "HEAD")
    code, _out, err = ex.run(*args, expect=None)
    if case.refused:
        assert code == 1, f"{command} -> {code}\n{err}"
        assert "nothing was changed" in err, err
        assert snapshot(ex.project) == owned, f"{command} changed series.yaml or patches/"
        assert git(ex.wt, "rev-parse", "HEAD") == head
    else:
        assert code == 0, f"{command} -> {code}\n{err}"
    # The message names every changed file, what happened to it, and the ways out.
    assert f"{EDITED} (modified)" in err and f"{NEW} (new, untracked)" in err, err
    for words in case.says:
        assert words in err, err
    if case.refused:
        assert f"git -C {ex.wt} stash push -u" in err, err
    for rel, data in edits.items():
        assert (ex.wt / rel).read_bytes() == data, f"{command} lost {rel}"
    status = {line.strip() for line in git(ex.wt, "status", "--porcelain", "-uall").splitlines()}
    assert {f"M {EDITED}", f"?? {NEW}"} <= status, status


def test_a_refused_rebase_step_goes_on_once_the_edit_is_put_aside(tmp_path, capsys):
    """The way out the message names works: stash, finish the rebase, pop the stash."""
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    _stopped_rebase(ex)
    edits = _edit(ex)
    ex.run("rebase", "--continue", expect=1)
    git(ex.wt, "stash", "push", "-q", "-u")
    ex.run("rebase", "--continue")
    assert load(ex.project).base.tag == "v1.3.0"
    git(ex.wt, "stash", "pop", "-q")
    for rel, data in edits.items():
        assert (ex.wt / rel).read_bytes() == data


def test_continue_takes_a_file_the_patch_did_not_touch_and_names_it(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    _stopped_rebase(ex)
    conflict_tree = ex.project / ".forkpatch" / "rebase-worktree"
    (conflict_tree / EDITED).write_bytes(b"# needed by the resolution\n")
    _, _, err = ex.run("rebase", "--continue")
    assert f"'odd-width-padding' now also changes {EDITED}" in err, err
    text = (ex.project / "patches" / "odd-width-padding.patch").read_text()
    assert f"diff --git a/{EDITED} b/{EDITED}" in text
    assert "+# needed by the resolution" in text
