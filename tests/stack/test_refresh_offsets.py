"""Editing a middle patch rewrites a patch above only when its content must change.

A patch above whose hunks merely moved (an edit below added lines) keeps its file:
it still applies, with an offset, to exactly the same result; `status` says
`offset`. `export --offsets` / `refresh --offsets` rewrite such files on request.
A file whose stale line numbers would land its hunk somewhere else is rewritten.
"""

from __future__ import annotations

import json

from support.git import git, numbered
from support.projects import scratch_project, snapshot


def _changed(before: dict[str, bytes], after: dict[str, bytes]) -> set[str]:
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}


def _two_patches(tmp_path, capsys):
    """low changes line 3 of f.txt, high changes line 30 of the same file."""
    _fork, project, run = scratch_project(tmp_path, capsys, {"f.txt": numbered(40)})
    run("apply")
    f = project / ".forkpatch" / "worktree" / "f.txt"
    for name, old, new in (("low", "line 3\n", "LINE 3\n"), ("high", "line 30\n", "LINE 30\n")):
        run("new", name)
        f.write_text(f.read_text().replace(old, new))
        run("refresh")
    return project, run, f


def test_refresh_of_a_middle_patch_leaves_pure_offsets_unwritten(tmp_path, capsys):
    project, run, f = _two_patches(tmp_path, capsys)
    high_before = (project / "patches" / "high.patch").read_bytes()
    before = snapshot(project)
    run("edit", "low")
    f.write_text(f.read_text().replace("line 5\n", "line 5\nadded a\nadded b\n"))
    _, _, err = run("refresh")
    assert _changed(before, snapshot(project)) == {"patches/low.patch"}
    assert "only their line numbers moved: high" in err
    assert "LINE 30" in f.read_text()  # the stack is whole again
    _, out, _ = run("status", "--json")
    statuses = {p["name"]: p["status"] for p in json.loads(out)["patches"]}
    assert statuses == {"low": "clean", "high": "offset"}
    # Saved: nothing refuses for "changes not written to patches/", export writes nothing.
    mid = snapshot(project)
    _, out, _ = run("export")  # what export did is its result: stdout
    assert "0 patch file(s) changed" in out and "only their line numbers moved: high" in out
    assert snapshot(project) == mid
    run("rename", "high", "upper")
    run("rename", "upper", "high")
    assert snapshot(project) == mid
    # On request the offsets are written: the hunk header moves by two lines, nothing else.
    _, out, _ = run("export", "--offsets")
    assert "high" in out
    after = (project / "patches" / "high.patch").read_bytes()
    assert after != high_before
    assert b"@@ -27,7 +27,7 @@" in high_before
    assert after == high_before.replace(b"@@ -27,7 +27,7 @@", b"@@ -29,7 +29,7 @@")
    _, out, _ = run("status", "--json")
    assert {p["status"] for p in json.loads(out)["patches"]} == {"clean"}


def test_refresh_offsets_flag_rewrites_the_patches_above(tmp_path, capsys):
    project, run, f = _two_patches(tmp_path, capsys)
    before = snapshot(project)
    run("edit", "low")
    f.write_text(f.read_text().replace("line 5\n", "line 5\nadded\n"))
    run("refresh", "--offsets")
    assert _changed(before, snapshot(project)) == {"patches/low.patch", "patches/high.patch"}


def test_content_change_above_is_written(tmp_path, capsys):
    """An edit that changes the context of the patch above (a 3-way merge) rewrites it."""
    project, run, f = _two_patches(tmp_path, capsys)
    before = snapshot(project)
    run("edit", "low")
    f.write_text(f.read_text().replace("line 27\n", "line twenty-seven\n"))
    run("refresh")
    assert _changed(before, snapshot(project)) == {"patches/low.patch", "patches/high.patch"}
    assert " line twenty-seven\n" in (project / "patches" / "high.patch").read_text()


def test_stale_offsets_that_would_land_elsewhere_are_written(tmp_path, capsys):
    """Two identical blocks; high changes the second. The stack is rewritten by hand
    (git in the work tree) so that low adds 17 lines and high still changes the second
    block: high's old line numbers now point at the first block, so although its diff
    differs only in line numbers, its file no longer gives the same tree: export
    writes it."""
    block = "".join(f"same {i}\n" for i in range(7))
    text = numbered(5) + block + numbered(10, "mid") + block + numbered(5, "end")
    _fork, project, run = scratch_project(tmp_path, capsys, {"g.txt": text})
    run("apply")
    wt = project / ".forkpatch" / "worktree"
    g = wt / "g.txt"
    run("new", "low")
    g.write_text(g.read_text().replace("line 2\n", "LINE 2\n"))
    run("refresh")
    run("new", "high")
    second = g.read_text().rindex("same 3\n")
    g.write_text(g.read_text()[:second] + "SAME 3\n" + g.read_text()[second + 7 :])
    run("refresh")
    before = snapshot(project)
    high = git(wt, "rev-parse", "HEAD")
    git(wt, "reset", "-q", "--hard", "HEAD~1")
    g.write_text(g.read_text().replace("line 4\n", "line 4\n" + numbered(17, "new")))
    git(wt, "commit", "-q", "-a", "--amend", "--no-edit")
    git(wt, "cherry-pick", high)
    assert g.read_text().count("SAME 3\n") == 1 and g.read_text().index("SAME 3") > second
    tree = git(wt, "rev-parse", "HEAD^{tree}")
    run("export")
    assert _changed(before, snapshot(project)) == {"patches/low.patch", "patches/high.patch"}
    # Re-applied from the files, the tree is the one the work tree had.
    run("apply", "--force")
    assert git(wt, "rev-parse", "HEAD^{tree}") == tree
