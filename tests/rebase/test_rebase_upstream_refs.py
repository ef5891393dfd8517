"""Issue 19: the upstream commit a patch names is evidence.

A backport names the upstream commit it came from; the team adapted its context,
so its patch-id differs, and upstream changed the same line again later, so it
neither applies nor reverse-applies to the new tag: git stops on a conflict. When
the named commit is in the new tag's history and makes the same change, the
patch is ``upstreamed`` with that commit as evidence; when it is there but its
change differs, the conflict says which commit probably replaces the patch.
A shallow fork clone that lacks the history between the tags stops with an
error that says how deep the clone must be.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from support.git import GIT_ENV, ScratchRepo, replace_once
from support.projects import LINES

V1 = replace_once(LINES, "line 19\n", "line 19 (v1)\n")  # the release the series was made on
FIX = "line 20 fixed\n"


class Upstream:
    """Upstream's history after v1: its context moves on, then the fix (U), then the
    fixed line changes again, so that the backport conflicts with v2."""

    def __init__(self, fix_line: str = FIX) -> None:
        self.fix_line = fix_line
        self.fix = ""

    def __call__(self, fork: ScratchRepo) -> None:
        moved = replace_once(V1, "line 19 (v1)\n", "line 19\n")
        fork.add_file("a.py", moved)
        fork.commit("Upstream tidies line 19")
        fork.add_file("a.py", replace_once(moved, "line 20\n", self.fix_line))
        self.fix = fork.commit("Fix line 20")
        fork.add_file("a.py", replace_once(moved, "line 20\n", "line 20 fixed, and more\n"))
        fork.commit("Improve the fix of line 20")
        fork.add_file("other.py", "other\n")
        fork.commit("Unrelated")
        fork.tag("v2")


def _series(scenario, upstream: Upstream, reference):
    """p1: the backport of upstream's fix on v1 (context adapted); p2: independent.
    ``reference(fix_commit)`` is the line naming the upstream commit in p1's header."""
    s = scenario(
        {"a.py": V1, "b.py": LINES},
        [
            ("p1", {"a.py": replace_once(V1, "line 20\n", FIX)}),
            ("p2", {"b.py": replace_once(LINES, "line 5\n", "line 5 p2\n")}),
        ],
        upstream,
    )
    path = s.project / "patches" / "p1.patch"
    text = path.read_text()
    path.write_text(text.replace("\ndiff --git", f"\n{reference(upstream.fix)}\n\ndiff --git", 1))
    return s


REFERENCES = {
    "Upstream-Status": lambda sha: (
        f"Upstream-Status: Backport [https://git.example.org/cgit/x.git/commit/?id={sha}]"
    ),
    "Upstream-Status abbreviated": lambda sha: f"Upstream-Status: Backport [{sha[:12]}]",
    "Origin": lambda sha: f"Origin: upstream, https://github.com/example/x/commit/{sha}",
    "cherry picked from": lambda sha: f"(cherry picked from commit {sha})",
    "From": lambda sha: f"From {sha} Mon Sep 17 00:00:00 2001",
}


@pytest.mark.parametrize("how", sorted(REFERENCES))
def test_an_adapted_backport_whose_commit_is_in_the_tag_is_upstreamed(scenario, how):
    up = Upstream()
    s = _series(scenario, up, REFERENCES[how])
    data = s.check("v2")
    st = {p["name"]: p for p in data["patches"]}
    assert st["p1"]["status"] == "upstreamed", st["p1"]
    evidence = st["p1"]["evidence"]
    assert up.fix[:12] in evidence and "'Fix line 20'" in evidence and "v2" in evidence
    assert "same added and removed lines" in evidence
    assert st["p2"]["status"] == "clean"
    # The rebase drops it with that evidence in its report.
    _code, out, _err = s.run("rebase", "--onto", "v2", "--json")
    rep = json.loads(out)
    assert [d["name"] for d in rep["dropped"]] == ["p1"]
    assert up.fix[:12] in rep["dropped"][0]["reason"]


def test_without_the_reference_git_and_forkpatch_both_conflict(scenario):
    """The same backport with no reference: no evidence, a conflict (as in git); the
    upstream commit with exactly its lines (under another subject) is only probable,
    and the conflict names it."""
    up = Upstream()
    s = _series(scenario, up, lambda sha: "Backported by hand.")
    st = {p["name"]: p for p in s.check("v2", expect=3)["patches"]}
    assert st["p1"]["status"] == "conflict"
    assert st["p1"]["replaced_by"].startswith(f"{up.fix[:12]} 'Fix line 20' (exactly")


def test_a_named_commit_with_another_change_to_the_same_files_is_a_declared_backport(scenario):
    """Upstream's commit changed the line otherwise, and the patch no longer applies:
    the patch says it is that commit's backport, and the target has the commit, so it
    is upstreamed on that declaration (a commit with other files is only named in the
    stop: tests/rebase/test_rebase_declared_backports.py)."""
    up = Upstream(fix_line="line 20 fixed differently\n")
    s = _series(scenario, up, REFERENCES["Origin"])
    st = {p["name"]: p for p in s.check("v2")["patches"]}
    assert st["p1"]["status"] == "upstreamed"
    assert st["p1"]["evidence"].startswith(f"declared backport: upstream commit {up.fix[:12]}")
    assert "touches exactly the patch's files" in st["p1"]["evidence"]


class SideBranch(Upstream):
    """The same history, plus the same fix made on a side branch that v2 does not have;
    ``fix`` is that side commit, so the backport names a commit outside v2."""

    def __call__(self, fork: ScratchRepo) -> None:
        super().__call__(fork)
        fork.git("checkout", "-q", "-b", "side", "v1")
        fork.add_file("a.py", replace_once(V1, "line 20\n", FIX))
        self.fix = fork.commit("The same fix on a side branch")
        fork.git("checkout", "-q", "main")


def test_a_named_commit_outside_the_tag_is_no_evidence(scenario):
    """A reference to a commit that is not in v2's history proves nothing (the conflict
    names v2's own commit with the patch's lines, not the side commit)."""
    side = SideBranch()
    s = _series(scenario, side, REFERENCES["Upstream-Status"])
    st = {p["name"]: p for p in s.check("v2", expect=3)["patches"]}
    assert st["p1"]["status"] == "conflict"
    assert side.fix[:12] not in st["p1"]["replaced_by"]
    assert "'Fix line 20' (exactly the patch's added and removed lines" in st["p1"]["replaced_by"]


def test_the_commit_named_in_series_yaml_counts_too(scenario):
    """``import`` records the ids a patch names in series.yaml (``upstream-commits``):
    the same evidence when the patch file itself no longer says it."""
    from dataclasses import replace

    from forkpatch.series import load_series, save_series

    up = Upstream()
    s = _series(scenario, up, lambda sha: "Backported from upstream.")
    path = s.project / "series.yaml"
    series = load_series(path)
    save_series(
        series.with_patches(
            replace(e, upstream_commits=(up.fix[:12],)) if e.name == "p1" else e
            for e in series.patches
        ),
        path,
    )
    st = {p["name"]: p for p in s.check("v2")["patches"]}
    assert st["p1"]["status"] == "upstreamed"
    assert up.fix[:12] in st["p1"]["evidence"] and "upstream-commits" in st["p1"]["evidence"]


# --------------------------------------------------------------------------- shallow clones


def _git(*args: str, cwd: Path | None = None) -> str:
    return (
        subprocess.run(
            ["git", *args],
            cwd=cwd,
            env={**__import__("os").environ, **GIT_ENV},
            check=True,
            capture_output=True,
        )
        .stdout.decode()
        .strip()
    )


def test_a_shallow_clone_without_the_history_says_how_deep_it_must_be(scenario, tmp_path):
    up = Upstream()
    s = _series(scenario, up, REFERENCES["Origin"])
    shallow = tmp_path / "shallow.git"
    url = f"file://{s.fork.path}"
    _git("clone", "-q", "--bare", "--depth", "1", "--branch", "v2", url, str(shallow))
    _git("--git-dir", str(shallow), "fetch", "-q", "--depth", "1", url, "+refs/tags/*:refs/tags/*")
    code, _out, err = s.run("--fork-repo", str(shallow), "check", "--onto", "v2", expect=None)
    assert code == 1, err
    assert "shallow" in err and "history from" in err
    assert "--shallow-since=" in err or "--unshallow" in err
    # Deep enough: the same clone deepened works.
    _git("--git-dir", str(shallow), "fetch", "-q", "--unshallow", url, "+refs/tags/*:refs/tags/*")
    s.run("--fork-repo", str(shallow), "check", "--onto", "v2")
