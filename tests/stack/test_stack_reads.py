"""A command reads the applied patches (a walk of the stack's commits) once, and once
more only after it moved the work tree: the parts a command is made of share one
model, which asks git again after each write (never a stale stack)."""

from __future__ import annotations

import pytest

from forkpatch.git import Git
from support.git import git
from support.projects import three_patch_stack


@pytest.fixture
def walks(monkeypatch):
    """Each walk of the stack (``Git.first_parents``), as (base, head-of-the-work-tree)."""
    calls: list[tuple[str, str]] = []
    real = Git.first_parents

    def counted(self, base, head, **kw):
        calls.append((base, self.rev_parse(head) or ""))
        return real(self, base, head, **kw)

    monkeypatch.setattr(Git, "first_parents", counted)
    return calls


def _stack(tmp_path, capsys):
    _project, run, wt, f = three_patch_stack(tmp_path, capsys)
    return run, wt, f


def _once_per_head(calls: list[tuple[str, str]]) -> None:
    """No two walks of the same stack: each one follows a move of HEAD."""
    assert len(calls) == len(set(calls)), calls


def test_edit_and_refresh_of_a_middle_patch_walk_the_stack_once_each(tmp_path, capsys, walks):
    run, wt, f = _stack(tmp_path, capsys)
    walks.clear()
    run("edit", "low")
    assert len(walks) == 1, walks
    f.write_text(f.read_text().replace("line 30\n", "line thirty\n"))
    walks.clear()
    run("refresh")
    assert len(walks) == 1, walks
    assert "line thirty" in git(wt, "show", "HEAD~2:f.txt")  # low, under mid and high again


@pytest.mark.parametrize(
    ("command", "most"),
    [
        (["pop"], 2),  # the stack, then the top the CLI names after it moved
        (["pop", "--all"], 2),
        (["top"], 1),
        (["export"], 1),
        (["rename", "mid", "middle"], 2),  # the stack, then the one rebuilt from the files
        (["move", "high", "--before", "mid"], 2),
    ],
)
def test_a_command_walks_the_stack_once_per_position_of_its_head(
    tmp_path, capsys, walks, command, most
):
    run, _wt, _f = _stack(tmp_path, capsys)
    walks.clear()
    run(*command)
    assert 1 <= len(walks) <= most, walks
    _once_per_head(walks)


def test_push_walks_the_stack_before_and_after_it_moves(tmp_path, capsys, walks):
    run, wt, _f = _stack(tmp_path, capsys)
    run("pop", "--all")
    for expected_top in ("low", "mid"):
        walks.clear()
        run("push")
        assert len(walks) == 2, walks  # once where it stood, once where it went
        _once_per_head(walks)
        assert git(wt, "log", "-1", "--format=%s") == f"{expected_top}: {expected_top}"
