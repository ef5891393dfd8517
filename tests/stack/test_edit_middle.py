"""Editing a middle patch: the patches above are re-applied on refresh, or nothing changes."""

from __future__ import annotations

import json

import pytest

from support.git import git, numbered
from support.projects import mtimes, scratch_project, snapshot, three_patch_stack


def _series(tmp_path, capsys):
    """Three patches on one file: low (line 3), mid (line 20), high (line 5, near low)."""
    return three_patch_stack(tmp_path, capsys)


def test_edit_middle_not_touching_upper(tmp_path, capsys):
    project, run, wt, f = _series(tmp_path, capsys)
    before = snapshot(project)
    m = mtimes(project)
    run("edit", "low")
    assert "LINE 20" not in f.read_text()
    f.write_text(f.read_text().replace("line 30\n", "line thirty\n"))
    run("refresh")
    after = snapshot(project)
    assert {k for k in after if after[k] != before[k]} == {"patches/low.patch"}
    assert mtimes(project)["patches/mid.patch"] == m["patches/mid.patch"]
    assert mtimes(project)["patches/high.patch"] == m["patches/high.patch"]
    _, out, _ = run("top")
    assert out.strip() == "high"
    text = f.read_text()
    assert "line thirty" in text and "LINE 20" in text and "line five" in text
    assert git(wt, "status", "--porcelain") == ""


def test_edit_middle_breaking_upper_changes_nothing_then_resolve(tmp_path, capsys):
    project, run, _wt, f = _series(tmp_path, capsys)
    run("edit", "low")
    before = snapshot(project)
    m = mtimes(project)
    f.write_text(f.read_text().replace("line 4\n", "line FOUR\n"))  # context of 'high'
    _, _, err = run("refresh", expect=3)
    assert "'high'" in err and "f.txt" in err and "hunk 1" in err
    assert "nothing in patches/ was changed" in err
    assert snapshot(project) == before
    assert mtimes(project) == m
    assert "line FOUR" in f.read_text()  # the edit is kept
    _, out, _ = run("status", "--json")
    assert '"editing": "low"' in out

    # Resolution 1: adjust the edit so 'high' applies again; refresh re-applies it.
    f.write_text(
        f.read_text().replace("line FOUR\n", "line 4\n").replace("line 10\n", "line TEN\n")
    )
    run("refresh")
    _, out, _ = run("top")
    assert out.strip() == "high"
    assert "+line TEN" in (project / "patches" / "low.patch").read_text()
    assert snapshot(project)["patches/high.patch"] == before["patches/high.patch"]


def test_edit_middle_breaking_upper_force_then_merge(tmp_path, capsys):
    project, run, wt, f = _series(tmp_path, capsys)
    run("edit", "low")
    before = snapshot(project)
    f.write_text(f.read_text().replace("line 4\n", "line FOUR\n"))
    run("refresh", expect=3)
    # Resolution 2: save 'low' alone, bring the rest back with a merge, resolve, refresh.
    _, _, err = run("refresh", "--force")
    after = snapshot(project)
    assert {k for k in after if after[k] != before[k]} == {"patches/low.patch"}
    assert "+line FOUR" in after["patches/low.patch"].decode()
    _, out, _ = run("top")
    assert out.strip() == "low"
    _, _, err = run("push", "--all", "--merge", expect=3)
    assert "'high'" in err and "conflict markers" in err and "f.txt" in err
    assert snapshot(project)["patches/high.patch"] == before["patches/high.patch"]
    assert "<<<<<<<" in f.read_text()
    _, _, err = run("refresh", expect=3)
    assert "conflict markers" in err
    text = f.read_text()
    start, end = text.index("<<<<<<<"), text.index(">>>>>>>")
    end = text.index("\n", end) + 1
    f.write_text(text[:start] + "line FOUR\nline five\n" + text[end:])
    run("refresh")
    final = (project / "patches" / "high.patch").read_text()
    assert "-line 5\n+line five\n" in final and " line FOUR\n" in final
    _, out, _ = run("status", "--json")
    assert '"conflict"' not in out
    assert git(wt, "status", "--porcelain") == ""


def test_export_refuses_unresolved_markers_of_a_merge(tmp_path, capsys):
    """`export` after `push --merge` and before resolving writes nothing (as refresh
    refuses); --force exports the markers; a patch whose file already holds marker
    lines (a file about merges, say) is not taken for an unresolved merge."""
    project, run, _wt, f = _series(tmp_path, capsys)
    run("edit", "low")
    f.write_text(f.read_text().replace("line 4\n", "line FOUR\n"))
    run("refresh", "--force")
    run("push", "--all", "--merge", expect=3)
    before = snapshot(project)
    _, _, err = run("export", expect=3)
    assert "high" in err and "conflict markers" in err and "nothing was exported" in err
    assert "refresh" in err and "--force" in err
    assert snapshot(project) == before
    # Also with --offsets (every applied patch is rendered then).
    run("export", "--offsets", expect=3)
    assert snapshot(project) == before
    run("export", "--force")
    assert "+<<<<<<< " in (project / "patches" / "high.patch").read_text()
    # The file now holds the markers: a later export does not refuse what it already has.
    run("export")


def test_export_of_a_patch_that_adds_marker_lines_on_purpose(tmp_path, capsys):
    _fork, project, run = scratch_project(tmp_path, capsys, {"f.txt": numbered(10)})
    run("apply")
    wt = project / ".forkpatch" / "worktree"
    run("new", "doc")
    (wt / "merge.txt").write_text("<<<<<<< ours\nexample\n>>>>>>> theirs\n")
    run("refresh", "--force")
    run("export")
    run("export", "--offsets")


def test_push_merge_works_after_a_refresh_below_popped_patches(tmp_path, capsys):
    """Patches popped (not being edited) when a patch below them changes: `push` says
    to use `push --merge`, and that works (the old images are kept as merge bases),
    instead of failing with "no merge base for a 3-way merge"."""
    project, run, _wt, f = _series(tmp_path, capsys)
    run("pop", "low")
    f.write_text(f.read_text().replace("line 4\n", "line FOUR\n"))  # context of 'high'
    run("refresh")
    _, _, err = run("push", "--all", expect=3)
    assert "'high'" in err and "push --merge" in err
    _, _, err = run("push", "--all", "--merge", expect=3)
    assert "no merge base" not in err and "conflict markers" in err, err
    text = f.read_text()
    assert "<<<<<<<" in text
    start, end = text.index("<<<<<<<"), text.index(">>>>>>>")
    end = text.index("\n", end) + 1
    f.write_text(text[:start] + "line FOUR\nline five\n" + text[end:])
    run("refresh")
    _, out, _ = run("top")
    assert out.strip() == "high"
    final = (project / "patches" / "high.patch").read_text()
    assert "-line 5\n+line five\n" in final and " line FOUR\n" in final


def _import_after_low(tmp_path, run):
    extra = tmp_path / "extra.patch"
    extra.write_text(
        "Add g.\n\ndiff --git a/g.txt b/g.txt\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/g.txt\n@@ -0,0 +1 @@\n+g\n"
    )
    run("import", "--after", "low", str(extra))


STACK_CHANGES = {
    "new": lambda tmp_path, run: run("new", "between"),
    "push": lambda tmp_path, run: run("push"),
    "rename the edited patch": lambda tmp_path, run: run("rename", "low", "low-2"),
    "rename a popped patch": lambda tmp_path, run: run("rename", "mid", "mid-2"),
    "delete a popped patch": lambda tmp_path, run: run("delete", "high"),
    "move a popped patch": lambda tmp_path, run: run("move", "high", "--before", "mid"),
    "import after the edited patch": _import_after_low,
}


@pytest.mark.parametrize("change", list(STACK_CHANGES))
def test_the_editing_position_follows_every_change_of_the_stack(tmp_path, capsys, change):
    """After `edit low` and any command that changes the stack, `status` names the patch
    being edited as the top of the stack, and `refresh` re-applies everything above it:
    the whole series is applied again, and no edit is left pending."""
    _project, run, _wt, _f = _series(tmp_path, capsys)
    run("edit", "low")
    STACK_CHANGES[change](tmp_path, run)
    status = json.loads(run("status", "--json")[1])
    top = run("top")[1].strip()
    if status["editing"] is not None:
        assert status["editing"] == top, status
    _, _, err = run("status")
    assert ("editing 'low'" not in err) or top == "low", err
    run("refresh")
    status = json.loads(run("status", "--json")[1])
    assert status["editing"] is None, status
    assert all(p["applied"] for p in status["patches"]), status
    # ... in series order: the stack is a prefix of series.yaml (here, all of it).
    assert run("top")[1].strip() == status["patches"][-1]["name"]
    run("push", "--all")  # refused if the stack were out of series order
    _, _, err = run("status")
    assert "editing '" not in err
