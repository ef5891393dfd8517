"""The same change upstream under another id: found from the lines, with evidence.

A team carries a pull request as a ``git format-patch`` mail made on v1. Upstream
merged it otherwise: squashed under its title with ``(#42)`` (its context moved,
so the patch-id differs) and restyled right after, or as two commits, so that
the patch neither applies nor reverse-applies to v2 and names no commit: git
stops on a conflict. The check names the upstream commit(s) and what matched;
where the match is only probable, the conflict names the likely commit.
"""

from __future__ import annotations

import json
import subprocess

from support.cli import Runner
from support.git import ScratchRepo, git_env, replace_once
from support.projects import LINES

FIXED = replace_once(
    replace_once(LINES, "line 20\n", "line 20 fixed\n"), "line 25\n", "line 25 fixed\n"
)
OTHER = {"GIT_AUTHOR_NAME": "Someone Else", "GIT_AUTHOR_EMAIL": "else@example.invalid"}


def _commit(fork: ScratchRepo, text: str, message: str, **env: str) -> str:
    fork.add_file("a.py", text)
    fork.git("add", "-A")
    subprocess.run(
        ["git", "-C", str(fork.path), "commit", "-q", "-m", message],
        env=git_env(**env),
        check=True,
    )
    return fork.git("rev-parse", "HEAD")


def _setup(tmp_path, capsys, upstream, *, conflict_first: bool = False):
    """v1; the pull request made on it, as a mail in the project; ``upstream(fork,
    tidy)`` makes v2 on top of a commit that moves the context (line 18).
    ``conflict_first``: a patch of b.py below it that conflicts with v2."""
    fork = ScratchRepo(tmp_path / "fork")
    fork.add_file("a.py", LINES)
    fork.add_file("b.py", LINES)
    fork.commit("initial")
    fork.tag("v1")
    fork.git("checkout", "-q", "-b", "pr")
    if conflict_first:
        fork.add_file("b.py", replace_once(LINES, "line 3\n", "line 3 ours\n"))
        fork.commit("Ours on b")
    _commit(fork, FIXED, "Fix lines 20 and 25\n\nThey were wrong.")
    out = tmp_path / "mail"
    fork.git("format-patch", "-q", "-o", str(out), "v1..pr")
    fork.git("checkout", "-q", "main")
    if conflict_first:
        fork.add_file("b.py", replace_once(LINES, "line 3\n", "line 3 upstream\n"))
        fork.commit("Upstream on b")
    tidy = replace_once(LINES, "line 18\n", "line 18 tidy\n")
    _commit(fork, tidy, "Tidy line 18")
    made = upstream(fork, tidy)
    fork.tag("v2")
    project = tmp_path / "project"
    project.mkdir()
    run = Runner(project, capsys)
    run("init", "--fork-url", str(fork.path), "--base", "v1")
    run("import", *map(str, sorted(out.glob("*.patch"))))
    return run, made


def _check(run, expect=0):
    _, out, _ = run("check", "--onto", "v2", "--json", expect=expect)
    return json.loads(out)["patches"][-1]


def _restyle(fork, text: str) -> None:
    _commit(fork, text.replace("line 20 fixed\n", "line 20 fixed  # restyled\n"), "Restyle")


def test_a_squashed_pull_request_restyled_after_is_upstreamed(tmp_path, capsys):
    def upstream(fork, tidy):
        text = replace_once(
            replace_once(tidy, "line 20\n", "line 20 fixed\n"), "line 25\n", "line 25 fixed\n"
        )
        merged = _commit(fork, text, "Fix lines 20 and 25 (#42)\n\nSquashed.")
        _restyle(fork, text)
        return merged

    run, merged = _setup(tmp_path, capsys, upstream)
    p = _check(run)
    assert p["status"] == "upstreamed", p
    assert merged[:12] in p["evidence"] and "'Fix lines 20 and 25 (#42)'" in p["evidence"]
    assert "subject and author and exactly its added and removed lines" in p["evidence"]
    _, out, _ = run("rebase", "--onto", "v2", "--json")
    dropped = json.loads(out)["dropped"]
    assert [d["name"] for d in dropped] == ["fix-lines-20-and-25"]
    assert merged[:12] in dropped[0]["reason"]


def test_a_change_merged_as_two_commits_is_upstreamed_naming_both(tmp_path, capsys):
    def upstream(fork, tidy):
        one = replace_once(tidy, "line 20\n", "line 20 fixed\n")
        first = _commit(fork, one, "Fix line 20")
        two = replace_once(one, "line 25\n", "line 25 fixed\n")
        second = _commit(fork, two, "Fix line 25", **OTHER)
        _restyle(fork, two)
        return first, second

    run, (first, second) = _setup(tmp_path, capsys, upstream)
    p = _check(run)
    assert p["status"] == "upstreamed", p
    assert first[:12] in p["evidence"] and second[:12] in p["evidence"]
    assert "together make exactly its added and removed lines" in p["evidence"]


def test_only_probable_matches_are_named_in_the_conflict(tmp_path, capsys):
    """Its lines under another subject; its subject from another author: a conflict
    naming the likely commit, never a drop."""

    def upstream(fork, tidy):
        text = replace_once(
            replace_once(tidy, "line 20\n", "line 20 fixed\n"), "line 25\n", "line 25 fixed\n"
        )
        merged = _commit(fork, text, "Parser: correct two lines")
        _restyle(fork, text)
        return merged

    run, merged = _setup(tmp_path, capsys, upstream)
    p = _check(run, expect=3)
    assert p["status"] == "conflict"
    assert p["replaced_by"].startswith(merged[:12]) and "another subject" in p["replaced_by"]
    _, _, err = run("rebase", "--onto", "v2", expect=3)
    assert f"upstream commit {merged[:12]} 'Parser: correct two lines'" in err
    assert "probably replaces this patch" in err
    run("rebase", "--abort")


def test_the_subject_of_another_author_is_only_probable(tmp_path, capsys):
    def upstream(fork, tidy):
        text = replace_once(
            replace_once(tidy, "line 20\n", "line 20 fixed\n"), "line 25\n", "line 25 fixed\n"
        )
        merged = _commit(fork, text, "Fix lines 20 and 25", **OTHER)
        _restyle(fork, text)
        return merged

    run, merged = _setup(tmp_path, capsys, upstream)
    p = _check(run, expect=3)
    assert p["status"] == "conflict" and p["replaced_by"].startswith(merged[:12])


def test_taken_then_reverted_upstream_is_no_evidence(tmp_path, capsys):
    def upstream(fork, tidy):
        text = replace_once(
            replace_once(tidy, "line 20\n", "line 20 fixed\n"), "line 25\n", "line 25 fixed\n"
        )
        merged = _commit(fork, text, "Fix lines 20 and 25 (#42)")
        _commit(fork, tidy, 'Revert "Fix lines 20 and 25 (#42)"')
        return merged

    run, _merged = _setup(tmp_path, capsys, upstream)
    p = _check(run)
    assert p["status"] in ("clean", "offset", "merged") and "evidence" not in p, p


def test_the_evidence_survives_a_stop_and_a_resumed_rebase(tmp_path, capsys):
    """Found when the rebase starts, kept in its journal for the walk after a stop."""

    def upstream(fork, tidy):
        text = replace_once(
            replace_once(tidy, "line 20\n", "line 20 fixed\n"), "line 25\n", "line 25 fixed\n"
        )
        merged = _commit(fork, text, "Fix lines 20 and 25 (#42)")
        _restyle(fork, text)
        return merged

    run, merged = _setup(tmp_path, capsys, upstream, conflict_first=True)
    _, _, err = run("rebase", "--onto", "v2", expect=3)
    assert "patch 'ours-on-b' does not apply" in err
    _, out, _ = run("rebase", "--skip", "--json")
    dropped = {d["name"]: d["reason"] for d in json.loads(out)["dropped"]}
    assert merged[:12] in dropped["fix-lines-20-and-25"]
    assert "subject and author" in dropped["fix-lines-20-and-25"]


def test_a_commit_with_a_line_more_often_than_the_patch_is_no_part_of_its_change(tmp_path, capsys):
    """A part of the change makes only the patch's lines, each at most as often as the
    patch does: a third commit that adds one of the patch's lines twice is left out, and
    the two commits that make the change are named without it."""

    def upstream(fork, tidy):
        one = replace_once(tidy, "line 20\n", "line 20 fixed\n")
        first = _commit(fork, one, "Fix line 20")
        two = replace_once(one, "line 25\n", "line 25 fixed\n")
        second = _commit(fork, two, "Fix line 25", **OTHER)
        three = replace_once(two, "line 40\n", "line 40\nline 20 fixed\nline 20 fixed\n")
        third = _commit(fork, three, "Note line 20 twice", **OTHER)
        _restyle(fork, three)
        return first, second, third

    run, (first, second, third) = _setup(tmp_path, capsys, upstream)
    p = _check(run)
    assert p["status"] == "upstreamed", p
    assert first[:12] in p["evidence"] and second[:12] in p["evidence"]
    assert third[:12] not in p["evidence"]
