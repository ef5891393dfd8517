"""`forkpatch check --onto` / `forkpatch rebase --onto` on scratch repositories."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support.git import replace_once
from support.projects import LINES, snapshot

# --------------------------------------------------------------------------- the example


def test_check_example_reports_each_status_and_changes_nothing(example_project):
    project, run = example_project
    before = snapshot(project)
    _, out, err = run("check", "--onto", "v1.3.0", "--json")
    data = json.loads(out)
    assert data["onto"] == "v1.3.0" and data["base"] == "v1.2.1"
    assert len(data["onto_commit"]) == 40 and len(data["base_commit"]) == 40
    st = {p["name"]: p for p in data["patches"]}
    assert {n: p["status"] for n, p in st.items()} == {
        "capability-floor": "clean",
        "odd-width-padding": "merged",
        "eager-block-cast": "clean",
        "cli-version": "upstreamed",
    }
    assert "patch-id matches upstream commit" in st["cli-version"]["evidence"]
    assert "[Bugfix] Read CLI version from the package" in st["cli-version"]["evidence"]
    assert "[2/4] odd-width-padding ... merged" in err
    assert snapshot(project) == before


def test_check_no_3way_conflicts_and_forecasts_the_rest(example_project):
    _project, run = example_project
    _code, out, err = run("check", "--onto", "v1.3.0", "--no-3way", "--json", expect=3)
    st = {p["name"]: p for p in json.loads(out)["patches"]}
    assert st["odd-width-padding"]["status"] == "conflict"
    assert "forecast" not in st["odd-width-padding"]
    conflict = st["odd-width-padding"]["conflicts"][0]
    assert conflict["path"].endswith("online/fp8.py") and conflict["hunks"] == [1]
    # The patches above it are classified all the same, and touch other files.
    assert st["eager-block-cast"]["status"] == "clean"
    assert st["cli-version"]["status"] == "upstreamed"
    for name in ("eager-block-cast", "cli-version"):
        fc = st[name]["forecast"]
        assert fc == {
            "after": "odd-width-padding",
            "independent": True,
            "depends_on": [],
            "if_merged": None,
        }
    assert "2 patch(es) independent of the conflicts" in err


def test_rebase_example_writes_result_and_report(example_project, tmp_path):
    project, run = example_project
    old_padding = (project / "patches" / "odd-width-padding.patch").read_bytes()
    old_floor = (project / "patches" / "capability-floor.patch").read_bytes()
    run("rebase", "--onto", "v1.3.0", "--report", str(tmp_path / "rep"))
    series = (project / "series.yaml").read_text()
    assert "tag: v1.3.0" in series and "cli-version" not in series
    assert not (project / "patches" / "cli-version.patch").exists()
    new_padding = (project / "patches" / "odd-width-padding.patch").read_bytes()
    assert new_padding != old_padding and b"scales.float()" in new_padding
    assert (project / "patches" / "capability-floor.patch").read_bytes() == old_floor
    # The refreshed series applies exactly: no offset, fuzz or merge left.
    _, out, _ = run("status", "--json")
    assert {p["status"] for p in json.loads(out)["patches"]} == {"clean"}
    rep = json.loads((tmp_path / "rep" / "rebase-v1.2.1-to-v1.3.0.json").read_text())
    assert rep["from"]["tag"] == "v1.2.1" and rep["to"]["tag"] == "v1.3.0"
    assert [d["name"] for d in rep["dropped"]] == ["cli-version"]
    assert "patch-id matches" in rep["dropped"][0]["reason"]
    padding = next(p for p in rep["patches"] if p["name"] == "odd-width-padding")
    assert (
        padding["rewritten"]
        and "+         layer.weight_scale = scales.float()" in padding["range_diff"]
    )
    assert sorted(rep["changed_files"]) == [
        "patches/cli-version.patch",
        "patches/odd-width-padding.patch",
        "series.yaml",
    ]
    md = (tmp_path / "rep" / "rebase-v1.2.1-to-v1.3.0.md").read_text()
    assert "| 4 | `cli-version` | upstreamed |" in md and "```diff" in md
    assert (project / ".forkpatch" / "reports" / "rebase-v1.2.1-to-v1.3.0.md").exists()
    assert not (project / ".forkpatch" / "rebase").exists()


def test_no_op_rebase_changes_zero_bytes(example_project):
    project, run = example_project
    before = snapshot(project)
    mtimes = {p: (project / p).stat().st_mtime_ns for p in before}
    run("rebase", "--onto", "v1.2.1")
    assert snapshot(project) == before
    assert {p: (project / p).stat().st_mtime_ns for p in before} == mtimes


def test_unknown_tag_lists_nearest(example_project):
    _project, run = example_project
    _, _, err = run("check", "--onto", "v1.3.1", expect=1)
    assert "'v1.3.1' is not a tag, branch or commit of the fork" in err and "v1.3.0" in err


def test_backwards_rebase_is_allowed_but_said(example_project):
    _project, run = example_project
    _, _, err = run("check", "--onto", "v1.2.0")
    assert "older than the series' base v1.2.1" in err and "backwards" in err


def test_rebase_moves_the_stack_work_tree(example_project):
    _project, run = example_project
    run("apply")
    run("rebase", "--onto", "v1.3.0")
    _, out, _ = run("status", "--json")
    data = json.loads(out)
    assert data["base"] == "v1.3.0"
    assert [p["name"] for p in data["patches"] if p["applied"]] == [
        "capability-floor",
        "odd-width-padding",
        "eager-block-cast",
    ]


# --------------------------------------------------------------------------- statuses


BASE_FILES = {"a.py": LINES, "b.py": LINES.replace("line", "bee")}


def test_offset_is_reported_and_refreshed(scenario):
    def upstream(fork):
        fork.add_file("a.py", "new 1\nnew 2\nnew 3\n" + LINES)
        fork.commit("upstream: prepend")
        fork.tag("v2")

    s = scenario(
        BASE_FILES,
        [("p1", {"a.py": replace_once(LINES, "line 20\n", "line 20 patched\n")})],
        upstream,
    )
    assert s.statuses("v2") == {"p1": "offset"}
    s.run("rebase", "--onto", "v2")
    assert "@@ -20,7 +20,7 @@" in s.patch("p1")
    assert s.statuses("v2") == {"p1": "clean"}


def test_upstreamed_verbatim_by_patch_id(scenario):
    patched = replace_once(LINES, "line 5\n", "line five\n")

    def upstream(fork):
        fork.add_file("a.py", patched)
        fork.commit("Upstream takes p1")
        # ...and later changes the very same lines, so it no longer reverse-applies.
        fork.add_file("a.py", replace_once(patched, "line five\n", "line 5 (v2)\n"))
        fork.commit("Upstream rewrites it")
        fork.tag("v2")

    s = scenario(BASE_FILES, [("p1", {"a.py": patched})], upstream)
    p = s.check("v2")["patches"][0]
    assert p["status"] == "upstreamed"
    assert (
        "patch-id matches upstream commit" in p["evidence"] and "Upstream takes p1" in p["evidence"]
    )


def test_upstreamed_in_a_different_form_content_present(scenario):
    patched = replace_once(LINES, "line 5\n", "line five\n")

    def upstream(fork):
        # The same change, in one commit with an unrelated one: the patch-id differs.
        fork.add_file("a.py", patched)
        fork.add_file("c.py", "other\n")
        fork.commit("Upstream: a different commit with the same change")
        fork.tag("v2")

    s = scenario(
        BASE_FILES,
        [("p1", {"a.py": patched}), ("p2", {"b.py": "bee 0\n" + BASE_FILES["b.py"]})],
        upstream,
    )
    st = {p["name"]: p for p in s.check("v2")["patches"]}
    assert st["p1"]["status"] == "upstreamed"
    assert "patch-id" not in st["p1"]["evidence"]
    assert (
        "content already present" in st["p1"]["evidence"]
        or "reverse-applies" in st["p1"]["evidence"]
    )
    assert st["p2"]["status"] == "clean"


def test_patch_follows_a_file_upstream_moved(scenario):
    def upstream(fork):
        fork.git("mv", "a.py", "pkg_a.py")
        fork.commit("Upstream moves a.py")
        fork.tag("v2")

    s = scenario(
        BASE_FILES, [("p1", {"a.py": replace_once(LINES, "line 9\n", "line nine\n")})], upstream
    )
    p = s.check("v2")["patches"][0]
    assert p["status"] in ("clean", "offset", "merged")
    assert p["moved"] == {"a.py": "pkg_a.py"}
    s.run("rebase", "--onto", "v2")
    assert "b/pkg_a.py" in s.patch("p1") and "a/a.py" not in s.patch("p1")
    assert s.statuses("v2") == {"p1": "clean"}


def test_file_upstream_rewrote_conflicts_with_files_and_hunks(scenario):
    def upstream(fork):
        fork.add_file("a.py", "".join(f"rewritten {i}\n" for i in range(1, 41)))
        fork.commit("Upstream rewrites a.py")
        fork.tag("v2")

    s = scenario(
        BASE_FILES,
        [
            ("p1", {"a.py": replace_once(LINES, "line 9\n", "line nine\n")}),
            ("p2", {"b.py": "bee 0\n" + BASE_FILES["b.py"]}),
        ],
        upstream,
    )
    data = s.check("v2", expect=3)
    p1, p2 = data["patches"]
    assert p1["status"] == "conflict" and p1["conflicts"][0]["path"] == "a.py"
    assert p1["conflicts"][0]["hunks"] == [1]
    assert p2["status"] == "clean" and p2["forecast"]["independent"]


def test_fuzz_is_reported_and_refreshed_away(scenario):
    def upstream(fork):
        fork.add_file("a.py", replace_once(LINES, "line 17\n", "line 17 changed\n"))
        fork.commit("Upstream touches a context line")
        fork.tag("v2")

    s = scenario(
        BASE_FILES,
        [("p1", {"a.py": replace_once(LINES, "line 20\n", "line 20 patched\n")})],
        upstream,
    )
    assert s.statuses("v2", "--fuzz", "1") == {"p1": "fuzz"}
    assert s.statuses("v2", "--no-3way", expect=3) == {"p1": "conflict"}
    s.run("rebase", "--onto", "v2", "--fuzz", "1")
    assert "line 17 changed" in s.patch("p1")
    assert s.statuses("v2", "--no-3way") == {"p1": "clean"}


def test_no_3way_with_fuzz_is_a_usage_error(example_project):
    _, run = example_project
    run("check", "--onto", "v1.3.0", "--no-3way", "--fuzz", "1", expect=2)


# --------------------------------------------------------------------------- conflicts


def _conflict_scenario(scenario):
    """p1 conflicts on v2 (upstream changed the line it changes); p2 and p3 are fine."""

    def upstream(fork):
        fork.add_file("a.py", replace_once(LINES, "line 9\n", "line 9 upstream\n"))
        fork.commit("Upstream edits line 9")
        fork.tag("v2")

    return scenario(
        BASE_FILES,
        [
            ("p0", {"b.py": "bee 0\n" + BASE_FILES["b.py"]}),
            ("p1", {"a.py": replace_once(LINES, "line 9\n", "line 9 ours\n")}),
            (
                "p2",
                {
                    "a.py": replace_once(
                        replace_once(LINES, "line 9\n", "line 9 ours\n"),
                        "line 30\n",
                        "line 30 p2\n",
                    )
                },
            ),
        ],
        upstream,
    )


def _conflict_files(project: Path) -> Path:
    return project / ".forkpatch" / "rebase-worktree"


def test_conflict_stops_with_a_work_tree_then_continue(scenario):
    s = _conflict_scenario(scenario)
    before = snapshot(s.project)
    _, _, err = s.run("rebase", "--onto", "v2", expect=3)
    wt = _conflict_files(s.project)
    assert "patch 'p1' does not apply to v2" in err and str(wt) in err
    assert "forkpatch rebase --continue" in err
    assert snapshot(s.project) == before  # nothing written yet
    text = (wt / "a.py").read_text()
    assert "<<<<<<< v2" in text and "line 9 ours" in text and "line 9 upstream" in text
    assert (wt / "b.py").read_text().startswith("bee 0\n")  # p0 below is applied
    # Any other command says what is going on; mutating ones refuse.
    _, _, err = s.run("status")
    assert "a rebase onto v2 is in progress" in err and "--continue" in err
    _, _, err = s.run("import", str(s.project / "patches" / "p0.patch"), expect=1)
    assert "refused while a rebase onto v2 is in progress" in err
    # --continue refuses while markers remain.
    _, _, err = s.run("rebase", "--continue", expect=3)
    assert "conflict markers remain in a.py" in err
    (wt / "a.py").write_text(replace_once(LINES, "line 9\n", "line 9 upstream and ours\n"))
    _, out, _ = s.run("rebase", "--continue", "--json")
    rep = json.loads(out)
    st = {p["name"]: p["status"] for p in rep["patches"]}
    assert st == {"p0": "clean", "p1": "resolved", "p2": "clean"}
    assert "+line 9 upstream and ours" in s.patch("p1")
    assert "tag: v2" in (s.project / "series.yaml").read_text()
    assert not (s.project / ".forkpatch" / "rebase").exists()
    # The work tree stays for the next rebase (made once, moved incrementally).
    assert (wt / ".git").is_file()
    assert s.statuses("v2") == {"p0": "clean", "p1": "clean", "p2": "clean"}


def test_conflict_skip_drops_the_patch(scenario):
    s = _conflict_scenario(scenario)
    s.run("rebase", "--onto", "v2", expect=3)
    _, out, _ = s.run("rebase", "--skip", "--json")
    rep = json.loads(out)
    assert [d["name"] for d in rep["dropped"]] == ["p1"]
    assert "--skip" in rep["dropped"][0]["reason"]
    assert not (s.project / "patches" / "p1.patch").exists()
    assert "name: p1\n" not in (s.project / "series.yaml").read_text()
    # p2 was made on top of p1 but its hunk is far from p1's: it still applies.
    assert {p["name"]: p["status"] for p in rep["patches"]}["p2"] == "clean"
    assert s.statuses("v2") == {"p0": "clean", "p2": "clean"}


def test_conflict_abort_restores_everything(scenario):
    s = _conflict_scenario(scenario)
    before = snapshot(s.project)
    s.run("rebase", "--onto", "v2", expect=3)
    s.run("rebase", "--abort")
    assert snapshot(s.project) == before
    assert not (s.project / ".forkpatch" / "rebase").exists()
    _, _, err = s.run("status")
    assert "in progress" not in err
    s.run("rebase", "--abort", expect=1)  # nothing left to abort


def test_second_rebase_refused_while_one_is_in_progress(scenario):
    s = _conflict_scenario(scenario)
    s.run("rebase", "--onto", "v2", expect=3)
    _, _, err = s.run("rebase", "--onto", "v2", expect=1)
    assert "in progress" in err


def test_rebase_needs_exactly_one_action(example_project):
    _, run = example_project
    run("rebase", expect=2)
    run("rebase", "--onto", "v1.3.0", "--abort", expect=2)


def test_patch_taken_then_reverted_upstream_is_not_upstreamed(scenario):
    patched = replace_once(LINES, "line 5\n", "line five\n")

    def upstream(fork):
        fork.add_file("a.py", patched)
        fork.commit("Upstream takes p1")
        fork.git("revert", "--no-edit", "HEAD")
        fork.tag("v2")

    s = scenario(BASE_FILES, [("p1", {"a.py": patched})], upstream)
    assert s.statuses("v2") == {"p1": "clean"}


def test_rebase_json_describes_where_it_stopped(scenario):
    """`rebase --json` that stops at a conflict still prints JSON on stdout: the patch,
    the work tree to resolve in and what to run next (exit 3)."""

    def upstream(fork):
        fork.add_file("a.py", "".join(f"rewritten {i}\n" for i in range(1, 41)))
        fork.commit("Upstream rewrites a.py")
        fork.tag("v2")

    s = scenario(
        BASE_FILES, [("p1", {"a.py": replace_once(LINES, "line 9\n", "line nine\n")})], upstream
    )
    _code, out, _err = s.run("rebase", "--onto", "v2", "--json", expect=3)
    data = json.loads(out)
    assert data["status"] == "stopped" and data["onto"] == "v2"
    assert data["conflict"] == "p1" and data["worktree"]
    assert data["patches"][0]["status"] == "conflict"
    assert "forkpatch rebase --continue" in data["next"]
    s.run("rebase", "--abort")


def test_a_continue_that_fails_while_git_stages_leaves_no_git_running(
    scenario, monkeypatch, tmp_path
):
    """--continue stages the resolution with git beside its own reading of the series;
    when that reading fails, the staging git (made slow here) is ended with the
    command, and the resolution is still there for the next --continue."""
    import shutil
    import sys
    import time

    from forkpatch.errors import StateError
    from forkpatch.project import Project
    from forkpatch.rebase import run as rebase_run
    from forkpatch.rebase.classifier import Classifier
    from forkpatch.rebase.conflict import ConflictTree

    s = _conflict_scenario(scenario)
    s.run("rebase", "--onto", "v2", expect=3)
    wt = _conflict_files(s.project)
    resolved = replace_once(LINES, "line 9\n", "line 9 upstream and ours\n")
    (wt / "a.py").write_text(resolved)
    shim = tmp_path / "slow-git"
    shim.mkdir()
    (shim / "git").write_text(
        f"#!{sys.executable}\n"
        "import os, sys, time\n"
        "if 'add' in sys.argv and '-A' in sys.argv:\n"
        "    time.sleep(60)\n"
        f"os.execv({shutil.which('git')!r}, ['git', *sys.argv[1:]])\n"
    )
    (shim / "git").chmod(0o755)
    begun = []
    real = ConflictTree.begin_record

    def spy(tree):
        begun.append(real(tree))
        return begun[-1]

    def unreadable(*_args, **_kwargs):
        raise StateError("the journal's series cannot be read")

    with monkeypatch.context() as m:
        m.setenv("PATH", f"{shim}{os.pathsep}{os.environ['PATH']}")
        m.setattr(ConflictTree, "begin_record", spy)
        m.setattr(Classifier, "resume", unreadable)
        start = time.monotonic()
        with pytest.raises(StateError):
            rebase_run.continue_(Project(s.project))
        assert len(begun) == 1 and begun[0].proc.poll() is not None  # ended, not left
        assert time.monotonic() - start < 30
    assert (wt / "a.py").read_text() == resolved
    _, out, _ = s.run("rebase", "--continue", "--json")
    assert {p["name"]: p["status"] for p in json.loads(out)["patches"]}["p1"] == "resolved"
