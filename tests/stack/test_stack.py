"""The stack commands: apply, push, pop, top, new, edit, refresh, delete, rename, move, export."""

from __future__ import annotations

import json

import pytest

from forkpatch.series import load_series, save_series
from support.git import git
from support.projects import (
    DIST_INFO_STEP,
    EXAMPLE_NAMES,
    copy_example,
    load,
    mtimes,
    snapshot,
)


def _log(wt) -> list[str]:
    out = git(wt, "log", "--format=%(trailers:key=Forkpatch-Patch,valueonly)", "v1.2.1..HEAD")
    return [x for x in out.split("\n") if x.strip()][::-1]


def test_apply_in_worktree_dir_and_commits(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    wt = tmp_path / "my-wt"
    before = snapshot(ex.project)
    _, out, _ = ex.run("apply", "--worktree", str(wt))
    assert str(wt) in out
    assert _log(wt) == EXAMPLE_NAMES
    msg = git(wt, "log", "-1", "--format=%B", "HEAD")
    assert msg.startswith("cli-version: Read the CLI version from the package")
    assert msg.rstrip().endswith("Forkpatch-Patch: cli-version")
    assert git(wt, "log", "-1", "--format=%an <%ae>") == "forkpatch <forkpatch@localhost>"
    assert git(wt, "status", "--porcelain") == ""
    assert git(wt, "rev-parse", "--abbrev-ref", "HEAD") == "forkpatch/stack"
    # Applying is deterministic: same inputs, same commit ids.
    head = git(wt, "rev-parse", "HEAD")
    ex.run("apply")
    assert git(wt, "rev-parse", "HEAD") == head
    assert snapshot(ex.project) == before
    # An existing non-empty directory is refused.
    other = tmp_path / "busy"
    other.mkdir()
    (other / "x").write_text("x")
    _, _, err = ex.run("apply", "--worktree", str(other), expect=2)
    assert "not empty" in err


def test_push_pop_top(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    _, out, _ = ex.run("top")
    assert out.strip() == "cli-version"
    ex.run("pop")
    assert _log(ex.wt) == EXAMPLE_NAMES[:3]
    ex.run("pop", "capability-floor")
    assert _log(ex.wt) == EXAMPLE_NAMES[:1]
    ex.run("push", "--all")
    # Popped patches are listed in the order they come off, top first (as quilt does).
    _, out, _ = ex.run("pop", "--all")
    popped = [line.removeprefix("popped ") for line in out.splitlines() if "popped" in line]
    assert popped == EXAMPLE_NAMES[::-1], out
    assert _log(ex.wt) == []
    # Nothing applied is a state, not a usage error: exit 1, as quilt's "No patches applied".
    _, out, err = ex.run("top", expect=1)
    assert out == "" and "no patch is applied" in err
    _, _, err = ex.run("pop", expect=2)
    ex.run("push")
    assert _log(ex.wt) == EXAMPLE_NAMES[:1]
    ex.run("push", "eager-block-cast")
    assert _log(ex.wt) == EXAMPLE_NAMES[:3]
    _, _, err = ex.run("push", "capability-floor", expect=2)
    assert "already applied" in err
    _, _, err = ex.run("push", "no-such", expect=1)
    assert "no patch named 'no-such'" in err
    ex.run("push", "--all")
    assert _log(ex.wt) == EXAMPLE_NAMES
    _, _, err = ex.run("push", expect=2)
    assert "all patches are applied" in err
    # --all asks for a state that already holds: a note, exit 0, nothing moves.
    head = git(ex.wt, "rev-parse", "HEAD")
    _, _, err = ex.run("push", "--all")
    assert "all patches are already applied" in err
    assert git(ex.wt, "rev-parse", "HEAD") == head
    # A typo'd name is named as such, whatever is applied, with a suggestion.
    for args in (("push", "eager-blockcast"), ("pop", "capabilty-floor")):
        _, _, err = ex.run(*args, expect=1)
        assert f"no patch named '{args[1]}'" in err and "did you mean" in err, err
    ex.run("pop", "--all")
    _, _, err = ex.run("pop", "capabilty-floor", expect=1)
    assert "did you mean 'capability-floor'" in err, err
    ex.run("push", "--all")
    # Unsaved changes are protected.
    (ex.wt / "vllm" / "__init__.py").write_text("changed\n")
    _, _, err = ex.run("pop", expect=1)
    assert "in no patch: vllm/__init__.py (modified)" in err, err
    assert f"git -C {ex.wt} stash" in err and "pass --force to discard" in err, err
    ex.run("pop", "--force")
    assert _log(ex.wt) == EXAMPLE_NAMES[:3]
    assert git(ex.wt, "status", "--porcelain") == ""


def test_new_refresh_export(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    ex.run("pop")  # new goes above the current top: between eager-block-cast and cli-version
    ex.run("new", "my-fix", "-m", "Fix the thing")
    series = load(ex.project)
    assert series.names() == [*EXAMPLE_NAMES[:3], "my-fix", "cli-version"]
    assert series.get("my-fix").summary == "Fix the thing"
    assert ex.patch("my-fix").read_bytes() == b""
    _, out, _ = ex.run("top")
    assert out.strip() == "my-fix"
    (ex.wt / "vllm" / "fix.py").write_text("FIXED = True\n")
    _, out, _ = ex.run("refresh")
    assert "wrote patches/my-fix.patch" in out
    text = ex.patch("my-fix").read_text()
    assert text.startswith("diff --git a/vllm/fix.py b/vllm/fix.py\nnew file mode 100644\n")
    assert "+FIXED = True\n" in text
    assert git(ex.wt, "status", "--porcelain") == ""
    # A second refresh with nothing new changes nothing.
    m = mtimes(ex.project)
    _, out, _ = ex.run("refresh")
    assert "nothing changed" in out
    assert mtimes(ex.project) == m
    # new refuses duplicates and bad names, changing nothing.
    before = snapshot(ex.project)
    ex.run("new", "my-fix", expect=2)
    ex.run("new", "Bad Name", expect=2)
    assert snapshot(ex.project) == before
    # A commit made by hand on top belongs to the patch below until refresh / export.
    (ex.wt / "vllm" / "fix.py").write_text("FIXED = 2\n")
    git(ex.wt, "commit", "-q", "-am", "wip")
    _, out, _ = ex.run("export")
    assert "my-fix" in out
    assert "+FIXED = 2\n" in ex.patch("my-fix").read_text()
    ex.run("push")
    _, out, _ = ex.run("status", "--json")
    assert [p["name"] for p in json.loads(out)["patches"] if p["applied"]] == [
        *EXAMPLE_NAMES[:3],
        "my-fix",
        "cli-version",
    ]


@pytest.mark.parametrize(
    "change",
    ["modified", "new file", "new directory", "deleted", "deleted and staged", "renamed by git mv"],
)
def test_refresh_saves_every_kind_of_change_git_status_names(tmp_path, capsys, change):
    """refresh stages only what `git status` named (no second walk of the tree): each
    kind of change still ends in the patch, and the work tree is clean after."""
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    ex.run("new", "my-change", "-m", "One change")
    target = ex.wt / "vllm" / "version.py"
    assert target.is_file()
    if change == "modified":
        target.write_text(target.read_text() + "EXTRA = 1\n")
        want = "+EXTRA = 1"
    elif change == "new file":
        (ex.wt / "vllm" / "brand_new.py").write_text("NEW = 1\n")
        want = "diff --git a/vllm/brand_new.py b/vllm/brand_new.py\nnew file mode"
    elif change == "new directory":
        (ex.wt / "extra" / "deep").mkdir(parents=True)
        (ex.wt / "extra" / "deep" / "x.txt").write_text("x\n")
        want = "diff --git a/extra/deep/x.txt b/extra/deep/x.txt\nnew file mode"
    elif change == "deleted":
        target.unlink()
        want = "diff --git a/vllm/version.py b/vllm/version.py\ndeleted file mode"
    elif change == "deleted and staged":
        git(ex.wt, "rm", "-q", "vllm/version.py")
        want = "diff --git a/vllm/version.py b/vllm/version.py\ndeleted file mode"
    else:
        git(ex.wt, "mv", "vllm/version.py", "vllm/moved_version.py")
        want = "rename to vllm/moved_version.py"
    _, out, _ = ex.run("refresh")
    assert "wrote patches/my-change.patch" in out
    assert want in ex.patch("my-change").read_text()
    assert git(ex.wt, "status", "--porcelain") == ""


def test_edit_lower_patch_and_refresh_reapplies_above(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    before = snapshot(ex.project)
    ex.run("edit", "odd-width-padding")
    _, out, _ = ex.run("top")
    assert out.strip() == "odd-width-padding"
    fp8 = ex.wt / "vllm/model_executor/layers/quantization/online/fp8.py"
    fp8.write_text(fp8.read_text().replace("zero-pad the rows", "pad the rows with zeros"))
    _, _, _err = ex.run("refresh")
    after = snapshot(ex.project)
    changed = {k for k in after if after[k] != before.get(k)}
    assert changed == {"patches/odd-width-padding.patch"}
    assert _log(ex.wt) == EXAMPLE_NAMES
    assert "pad the rows with zeros" in fp8.read_text()
    assert git(ex.wt, "status", "--porcelain") == ""
    # edit of an unapplied patch pushes to it.
    ex.run("pop", "--all")
    ex.run("edit", "eager-block-cast")
    assert _log(ex.wt) == EXAMPLE_NAMES[:3]
    ex.run("edit", "no-such", expect=1)


def test_delete(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    ex.run("delete", "cli-version")  # the top: popped, then removed
    assert load(ex.project).names() == EXAMPLE_NAMES[:3]
    assert not ex.patch("cli-version").exists()
    assert _log(ex.wt) == EXAMPLE_NAMES[:3]
    ex.run("pop", "--all")
    ex.run("delete", "odd-width-padding", "--keep-file")
    assert load(ex.project).names() == ["capability-floor", "eager-block-cast"]
    assert ex.patch("odd-width-padding").exists()
    _, _, err = ex.run("status")
    assert "odd-width-padding.patch is not listed" in err
    ex.run("delete", "nope", expect=1)


def test_rename(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    content = ex.patch("eager-block-cast").read_bytes()
    ex.run("rename", "eager-block-cast", "eager-cast")
    series = load(ex.project)
    assert series.names() == ["capability-floor", "odd-width-padding", "eager-cast", "cli-version"]
    assert series.get("eager-cast").file == "eager-cast.patch"
    assert ex.patch("eager-cast").read_bytes() == content
    assert not ex.patch("eager-block-cast").exists()
    assert _log(ex.wt) == ["capability-floor", "odd-width-padding", "eager-cast", "cli-version"]
    before = snapshot(ex.project)
    ex.run("rename", "eager-cast", "cli-version", expect=2)
    ex.run("rename", "eager-cast", "Bad/Name", expect=2)
    ex.run("rename", "nope", "x", expect=1)
    assert snapshot(ex.project) == before
    # Exporting after the rename changes nothing.
    m = mtimes(ex.project)
    ex.run("export")
    assert mtimes(ex.project) == m


def test_move(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    files = {n: ex.patch(n).read_bytes() for n in EXAMPLE_NAMES}
    ex.run("move", "cli-version", "--before", "capability-floor")
    order = ["cli-version", "capability-floor", "odd-width-padding", "eager-block-cast"]
    assert load(ex.project).names() == order
    assert _log(ex.wt) == order
    ex.run("move", "cli-version", "--to", "4")
    assert load(ex.project).names() == EXAMPLE_NAMES
    ex.run("move", "capability-floor", "--after", "odd-width-padding")
    assert load(ex.project).names()[:2] == ["odd-width-padding", "capability-floor"]
    assert {n: ex.patch(n).read_bytes() for n in EXAMPLE_NAMES} == files
    before = snapshot(ex.project)
    ex.run("move", "cli-version", expect=2)
    ex.run("move", "cli-version", "--to", "9", expect=2)
    assert snapshot(ex.project) == before


def test_move_refused_when_order_matters(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    ex.run("pop", "--all")
    ex.run("push", "capability-floor")
    base = ex.wt / "vllm/model_executor/layers/quantization/online/base.py"
    ex.run("new", "depends")
    base.write_text(base.read_text().replace("return 70", "return 70  # Volta"))
    ex.run("refresh")
    before = snapshot(ex.project)
    head = git(ex.wt, "rev-parse", "HEAD")
    _, _, err = ex.run("move", "depends", "--before", "capability-floor", expect=3)
    assert "patch 'depends' does not apply" in err and "nothing was changed" in err
    assert snapshot(ex.project) == before
    assert git(ex.wt, "rev-parse", "HEAD") == head


@pytest.mark.parametrize("applied", [True, False], ids=["work tree", "no work tree"])
@pytest.mark.parametrize("where", ["--before", "--after"])
def test_moving_a_patch_relative_to_itself_is_a_usage_error(tmp_path, capsys, where, applied):
    ex = copy_example(tmp_path, capsys)
    if applied:
        ex.run("apply")
    before = snapshot(ex.project)
    _, _, err = ex.run("move", "odd-width-padding", where, "odd-width-padding", expect=2)
    assert f"cannot move 'odd-width-padding' {where} itself; nothing was changed" in err, err
    assert "tip:" in err and "internal error" not in err
    assert snapshot(ex.project) == before


def test_rename_carries_along_a_summary_that_was_the_name(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    ex.run("new", "tmp-fix")  # no -m: the summary is the name
    ex.run("new", "other", "-m", "Other thing")
    ex.run("pop")
    ex.run("rename", "tmp-fix", "real-fix")
    ex.run("rename", "other", "other-2")
    series = load(ex.project)
    assert series.get("real-fix").summary == "real-fix"
    assert series.get("other-2").summary == "Other thing"  # a summary someone wrote stays
    ex.run("export")  # the work tree's commit agrees: nothing turns it back
    assert load(ex.project).get("real-fix").summary == "real-fix"


FP8 = "vllm/model_executor/layers/quantization/online/fp8.py"


@pytest.mark.parametrize(
    ("name", "with_step"),
    [
        ("odd-width-padding", False),
        ("capability-floor", False),
        ("eager-block-cast", True),  # a build step above it
        ("odd-width-padding", True),
    ],
)
def test_delete_a_middle_patch_re_applies_the_patches_above(tmp_path, capsys, name, with_step):
    ex = copy_example(tmp_path, capsys)
    if with_step:
        path = ex.project / "series.yaml"
        series = load_series(path)
        patches = list(series.patches)
        patches.insert(3, DIST_INFO_STEP)
        save_series(series.with_patches(patches), path)
    ex.run("apply")
    order = load(ex.project).names()
    others = {n: ex.patch(n).read_bytes() for n in EXAMPLE_NAMES if n != name}
    _, out, _ = ex.run("delete", name)
    assert f"deleted {name}" in out
    want = [n for n in order if n != name]
    assert load(ex.project).names() == want
    assert not ex.patch(name).exists()
    assert _log(ex.wt) == want  # the stack without it, everything above re-applied
    # The patches above keep their bytes; nothing is left unsaved or changed outside.
    assert {n: ex.patch(n).read_bytes() for n in others} == others
    _, out, _err = ex.run("status", "--json")
    doc = json.loads(out)
    assert doc["changes"] == [] and all(p["applied"] for p in doc["patches"]), doc
    assert git(ex.wt, "status", "--porcelain") == ""
    before = snapshot(ex.project)
    ex.run("export")
    assert snapshot(ex.project) == before


def test_delete_a_middle_patch_refuses_unsaved_work(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    before = snapshot(ex.project)
    head = git(ex.wt, "rev-parse", "HEAD")
    # An edit in no object.
    main = ex.wt / "vllm" / "entrypoints" / "cli" / "main.py"
    main.write_text(main.read_text() + "# mine\n")
    _, _, err = ex.run("delete", "odd-width-padding", expect=1)
    assert "uncommitted changes" in err and "main.py" in err
    assert snapshot(ex.project) == before and git(ex.wt, "rev-parse", "HEAD") == head
    # A commit not written to patches/.
    git(ex.wt, "commit", "-q", "-a", "--amend", "--no-edit")
    _, _, err = ex.run("delete", "odd-width-padding", expect=1)
    assert "not written to patches/" in err and "cli-version" in err
    assert snapshot(ex.project) == before
    assert main.read_text().endswith("# mine\n")


def test_delete_refuses_when_a_patch_above_needs_it(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    ex.run("new", "pad-tweak", "-m", "pad tweak")
    f = ex.wt / FP8
    text = f.read_text()
    line = next(x for x in text.splitlines() if "pad" in x and "=" in x)
    f.write_text(text.replace(line, line + "  # tweaked", 1))
    ex.run("refresh")
    before = snapshot(ex.project)
    head = git(ex.wt, "rev-parse", "HEAD")
    _, _, err = ex.run("delete", "odd-width-padding", expect=3)
    assert "patch 'pad-tweak' above 'odd-width-padding' does not apply without it" in err
    assert "nothing was changed" in err and "forkpatch delete pad-tweak" in err
    assert snapshot(ex.project) == before and git(ex.wt, "rev-parse", "HEAD") == head
    ex.run("delete", "pad-tweak")
    ex.run("delete", "odd-width-padding")
    assert load(ex.project).names() == ["capability-floor", "eager-block-cast", "cli-version"]
