"""The warm rebase's editing stack is made of the rebase's own commits.

A rebase that finds the series applied moves the editing work tree onto the new base.
Its stack is the rebase's commits (a build step's empty commit put between them, the
patches above it made again on it), not the series applied again from the files it has
just written: no fast-import, nothing parsed. Each stack commit's tree is the one a
fresh ``apply`` of the written files gives, patch by patch, whatever each patch's fate
(offset, merged, resolved by hand, skipped, upstreamed), so the stack and patches/
agree.
"""

from __future__ import annotations

import shutil

import pytest

from support.cli import Runner
from support.git import GitCalls, git, replace_once
from support.projects import LINES, load

FILES = {f"m{i}.py": LINES for i in range(5)}


def _edit(i: int, line: int, word: str) -> str:
    return replace_once(LINES, f"line {line}\n", f"line {line} {word}\n")


def _upstream(fork) -> None:
    fork.add_file("m0.py", "# moved down\n" + LINES)  # p0: offset
    fork.add_file("m1.py", _edit(1, 23, "upstream"))  # p1: merged (3-way)
    fork.add_file("m2.py", _edit(2, 20, "upstream"))  # p2: a conflict
    fork.add_file("m3.py", _edit(3, 20, "p3"))  # p3: upstreamed
    fork.commit("upstream")
    fork.tag("v2")


PATCHES = [
    ("p0", {"m0.py": _edit(0, 20, "p0")}),
    ("p1", {"m1.py": _edit(1, 20, "p1")}),
    ("p2", {"m2.py": _edit(2, 20, "p2")}),
    ("p3", {"m3.py": _edit(3, 20, "p3")}),
    ("p4", {"m4.py": _edit(4, 20, "p4")}),
]


def _with_build_step(project, after: str) -> None:
    text = (project / "series.yaml").read_text()
    entry = f"  - name: {after}\n"
    head, sep, rest = text.partition(entry)
    nxt = rest.find("  - name: ")
    step = "  - name: dist-info\n    build-step: vllm-dist-info\n    summary: the dist-info step\n"
    rest = rest[:nxt] + step + rest[nxt:] if nxt >= 0 else rest + step
    (project / "series.yaml").write_text(head + sep + rest)


def _stack(wt) -> list[tuple[str, str]]:
    """(the patch a commit carries, its tree) for the stack's commits, bottom first."""
    out = []
    log = git(wt, "log", "--reverse", "--format=%H %T", "v2..HEAD")
    for line in log.splitlines():
        commit, tree = line.split()
        name = git(wt, "log", "-1", "--format=%(trailers:key=Forkpatch-Patch,valueonly)", commit)
        out.append((name.strip(), tree))
    return out


@pytest.mark.parametrize("stop", ["resolve", "skip"])
@pytest.mark.parametrize("step_after", [None, "p0", "p3"])
def test_the_moved_stack_is_the_rebases_commits_and_what_the_files_give(
    scenario, tmp_path, monkeypatch, capsys, stop, step_after
):
    s = scenario(FILES, PATCHES, _upstream)
    if step_after is not None:
        _with_build_step(s.project, step_after)
    s.run("apply")
    s.run("rebase", "--onto", "v2", expect=3)
    ct = s.project / ".forkpatch" / "rebase-worktree"
    if stop == "resolve":
        (ct / "m2.py").write_text(replace_once(LINES, "line 20\n", "line 20 upstream p2\n"))
    calls = GitCalls(tmp_path / "calls")
    monkeypatch.setenv("PATH", calls.path)
    s.run("rebase", "--continue" if stop == "resolve" else "--skip")
    monkeypatch.undo()
    made = calls.take()
    assert not [c for c in made if " fast-import" in f" {c}"], made  # nothing applied again
    wt = s.project / ".forkpatch" / "worktree"
    moved = _stack(wt)
    # The same series applied afresh from the files written, in another project.
    fresh = tmp_path / "fresh"
    shutil.copytree(s.project, fresh, ignore=shutil.ignore_patterns(".forkpatch"))
    Runner(fresh, capsys)("apply")
    again = _stack(fresh / ".forkpatch" / "worktree")
    assert moved == again
    names = [name for name, _tree in moved]
    assert names == load(s.project).names()  # every patch left in the series, in order
    assert "p3" not in names and ("p2" in names) == (stop == "resolve")
    assert ("dist-info" in names) == (step_after is not None)
    assert git(wt, "status", "--porcelain") == ""
