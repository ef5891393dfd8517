"""Patch files and series.yaml entries changed outside forkpatch are never reverted.

A teammate's change arrives by `git pull` (or a hand edit) while a work tree exists:
`status` names it and the side that changed, `export` and `refresh` refuse to write
over it (``--force`` keeps the work tree), and `apply` / `edit` take it into a work
tree that has no edits of its own, without --force and losing nothing. Every test
runs real git on the example project; the team tests pull between two clones.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from forkpatch.fsutil import dump_state, parse_state
from support.cli import Runner
from support.git import ScratchRepo, git
from support.projects import snapshot

FP8 = "vllm/model_executor/layers/quantization/online/fp8.py"
MAIN = "vllm/entrypoints/cli/main.py"
PAD = "+        pad = (-layer.true_n) % self.block\n"
PAD_THEIRS = "+        pad = (-layer.true_n) % self.block  # teammate: rows, not columns\n"
DESC = "Fused projections have widths that are not multiples of 128.\n"
DESC_THEIRS = "Fused projections (qkv, gate-up) have widths that are not multiples of 128.\n"


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, (old, text)
    path.write_text(text.replace(old, new))


def _changes(run: Runner, expect: int = 0) -> list[dict]:
    return json.loads(run("status", "--json", expect=expect)[1])["changes"]


def _wt(project: Path) -> Path:
    return project / ".forkpatch" / "worktree"


def _entry_block(series: str, name: str) -> str:
    start = series.index(f"  - name: {name}\n")
    end = series.find("  - name: ", start + 1)
    return series[start : end if end >= 0 else len(series)]


@pytest.fixture
def applied(example_project):
    project, run = example_project
    run("apply")
    return project, run


# ----------------------------------------------------------------------------- one file


@pytest.mark.parametrize(
    ("old", "new"), [(PAD, PAD_THEIRS), (DESC, DESC_THEIRS)], ids=["body-line", "description"]
)
def test_a_modified_patch_file_is_reported_refused_and_taken(applied, old, new):
    project, run = applied
    patch = project / "patches" / "odd-width-padding.patch"
    _edit(patch, old, new)
    theirs = patch.read_bytes()

    _, _, err = run("status")
    assert "patches/odd-width-padding.patch was modified outside forkpatch" in err
    assert "no edits of its own" in err and "`forkpatch apply`" in err
    (change,) = _changes(run)
    assert change | {"old": None} == {
        "name": "odd-width-padding",
        "kind": "modified",
        "file": "odd-width-padding.patch",
        "old": None,
        "old_file": None,
        "side": "file",
        "applied": True,
    }

    for args in (("export",), ("export", "--offsets")):
        _, _, err = run(*args, expect=1)
        assert "patches/odd-width-padding.patch was modified outside forkpatch" in err
        assert "nothing was written" in err
        assert "`forkpatch apply`" in err and "`forkpatch export --force`" in err
        assert patch.read_bytes() == theirs

    # The natural flow: apply takes the file (no --force), then export changes nothing.
    _, _, err = run("apply")
    assert "odd-width-padding" in err and "`forkpatch apply` takes into the work tree" in err
    assert _changes(run) == []
    _, out, _ = run("export")
    assert "0 patch file(s) changed" in out
    assert patch.read_bytes() == theirs
    if old == PAD:
        assert PAD_THEIRS[1:] in (_wt(project) / FP8).read_text()
    else:
        log = git(_wt(project), "log", "--format=%B", "-1", "HEAD~2")
        assert DESC_THEIRS.strip() in log


def test_edit_takes_a_changed_file_into_a_clean_work_tree(applied):
    project, run = applied
    patch = project / "patches" / "odd-width-padding.patch"
    _edit(patch, PAD, PAD_THEIRS)
    _, _, err = run("edit", "capability-floor")
    assert "`forkpatch edit` takes into the work tree" in err and "odd-width-padding" in err
    base = _wt(project) / "vllm/model_executor/layers/quantization/online/base.py"
    base.write_text(base.read_text() + "# reviewed\n")
    run("refresh")
    run("export")
    assert PAD_THEIRS in patch.read_text()
    assert PAD_THEIRS[1:] in (_wt(project) / FP8).read_text()
    assert "+# reviewed" in (project / "patches" / "capability-floor.patch").read_text()
    assert _changes(run) == []


def test_refresh_refuses_to_overwrite_the_top_patch_changed_outside(applied):
    project, run = applied
    patch = project / "patches" / "cli-version.patch"
    _edit(patch, "+                        version=VLLM_VERSION)\n", "+  version=VLLM_VERSION)\n")
    theirs = patch.read_bytes()
    _, _, err = run("refresh", expect=1)
    assert "patches/cli-version.patch was modified outside forkpatch" in err
    assert "`forkpatch refresh --force`" in err
    assert patch.read_bytes() == theirs
    run("refresh", "--force")  # keep the work tree: its version is written
    assert patch.read_bytes() != theirs
    assert _changes(run) == []


def test_a_deleted_patch_file_is_not_written_back_without_force(applied):
    project, run = applied
    patch = project / "patches" / "eager-block-cast.patch"
    mine = patch.read_bytes()
    patch.unlink()
    (change,) = _changes(run, expect=3)  # it no longer applies: status says why
    assert (change["kind"], change["side"], change["name"]) == (
        "deleted",
        "file",
        "eager-block-cast",
    )
    _, _, err = run("export", expect=1)
    assert "patches/eager-block-cast.patch (patch 'eager-block-cast') was deleted" in err
    assert not patch.exists()
    run("export", "--force")  # keep the work tree: the file comes back from it
    assert patch.read_bytes() == mine
    assert _changes(run) == []


@pytest.mark.parametrize("name", ["capability-floor", "eager-block-cast", "cli-version"])
def test_a_deleted_patch_file_points_at_export_force_never_at_apply(applied, name):
    """`apply` cannot read a file that is gone: every command's tip names what restores
    it (`export --force` from the work tree, git for the committed file) or removes it."""
    project, run = applied
    patch = project / "patches" / f"{name}.patch"
    mine = patch.read_bytes()
    patch.unlink()
    _, _, err = run("status", expect=3)
    assert f"`forkpatch export --force` writes patches/{name}.patch again" in err
    assert "`forkpatch apply` (or `edit NAME`) takes the files" not in err
    for cmd in (("apply",), ("push",), ("edit", name), ("export",), ("rename", name, "x-y")):
        code, _, err = run(*cmd, expect=None)
        assert code != 0, (cmd, err)
        assert "`forkpatch export --force`" in err and f"forkpatch delete {name}" in err, err
        assert "tip: take the files: `forkpatch apply`" not in err, err
        assert not patch.exists()
    # The tip's way out works.
    run("export", "--force")
    assert patch.read_bytes() == mine
    assert _changes(run) == []
    run("apply")


@pytest.mark.parametrize(
    ("name", "typo"),
    [
        ("odd-width-padding", "odd-width-paddin.patch"),
        ("cli-version", "cli_version.patch"),
        ("capability-floor", "capabilty-floor.patch"),
    ],
)
def test_a_typo_in_file_is_named_as_a_typo_not_a_rename(applied, name, typo):
    project, run = applied
    series = project / "series.yaml"
    text = series.read_text()
    series.write_text(text.replace(f"file: {name}.patch", f"file: {typo}"))
    before = snapshot(project)
    changes = _changes(run, expect=3)
    assert [(c["kind"], c["file"], c["old_file"]) for c in changes] == [
        ("misnamed", typo, f"{name}.patch")
    ]
    _, out, err = run("status", expect=3)
    assert "renamed outside forkpatch" not in err
    assert f"names patches/{typo}, which does not exist" in err
    err += out
    assert f"did you mean patches/{name}.patch" in err
    # The orphan's tip is the typo, never an import that would make a second patch.
    assert f"forkpatch import patches/{name}.patch" not in err
    assert f"did you mean `file: {name}.patch`" in err
    for cmd in (("apply",), ("export",), ("export", "--force"), ("push",)):
        _, _, err = run(*cmd, expect=None)
        assert f"correct `file: {typo}`" in err, (cmd, err)
        assert snapshot(project) == before
        assert not (project / "patches" / typo).exists()
    series.write_text(text)
    assert _changes(run) == []


def test_a_typo_in_file_without_a_work_tree_suggests_the_file(example_project):
    project, run = example_project
    series = project / "series.yaml"
    series.write_text(
        series.read_text().replace("file: eager-block-cast.patch", "file: eager-blockcast.patch")
    )
    for cmd in (("status",), ("apply",)):
        _, _, err = run(*cmd, expect=1)
        assert "names patches/eager-blockcast.patch, which does not exist" in err
        assert "did you mean patches/eager-block-cast.patch" in err
        assert "correct `file: eager-blockcast.patch` to `file: eager-block-cast.patch`" in err


def test_an_entry_and_file_removed_outside_are_taken_by_apply(applied):
    """A teammate's `forkpatch delete`: the entry and its file are gone."""
    project, run = applied
    series = project / "series.yaml"
    text = series.read_text()
    series.write_text(text.replace(_entry_block(text, "eager-block-cast"), ""))
    (project / "patches" / "eager-block-cast.patch").unlink()
    (change,) = _changes(run)
    assert (change["kind"], change["applied"], change["side"]) == ("removed", True, "file")
    _, _, err = run("export", expect=1)
    assert "patch 'eager-block-cast' was removed from series.yaml outside forkpatch" in err
    before = snapshot(project)
    _, _, err = run("export", "--force")  # nothing to write it to: it is left out
    assert "series.yaml no longer names them: eager-block-cast" in err
    assert snapshot(project) == before
    run("apply")
    assert snapshot(project) == before
    assert run("top")[1].strip() == "cli-version"
    assert not (_wt(project) / "vllm/utils/deep_gemm.py").read_text().count("eager")
    run("export")
    assert snapshot(project) == before and _changes(run) == []


def test_an_entry_added_below_applied_patches_is_refused_then_taken(applied, tmp_path):
    project, run = applied
    extra = project / "patches" / "notes.patch"
    extra.write_text(
        "Operator notes.\n\ndiff --git a/NOTES.md b/NOTES.md\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/NOTES.md\n@@ -0,0 +1 @@\n+V100 notes\n"
    )
    series = project / "series.yaml"
    text = series.read_text()
    block = _entry_block(text, "eager-block-cast")
    series.write_text(
        text.replace(block, "  - name: notes\n    file: notes.patch\n    summary: notes\n" + block)
    )
    (change,) = _changes(run)
    assert (change["kind"], change["name"], change["applied"]) == ("added", "notes", True)
    _, _, err = run("export", expect=1)
    assert "series.yaml entry 'notes' (patches/notes.patch) was added outside forkpatch" in err
    before = snapshot(project)
    run("apply")
    assert (_wt(project) / "NOTES.md").read_text() == "V100 notes\n"
    run("export")
    assert snapshot(project) == before and _changes(run) == []


def test_an_entry_appended_after_the_stack_is_pushed_as_it_is(applied):
    project, run = applied
    (project / "patches" / "notes.patch").write_text(
        "Operator notes.\n\ndiff --git a/NOTES.md b/NOTES.md\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/NOTES.md\n@@ -0,0 +1 @@\n+V100 notes\n"
    )
    with (project / "series.yaml").open("a") as f:
        f.write("  - name: notes\n    file: notes.patch\n    summary: notes\n")
    (change,) = _changes(run)
    assert (change["kind"], change["applied"]) == ("added", False)
    run("export")  # nothing it would write changed: not refused
    run("push")
    assert (_wt(project) / "NOTES.md").read_text() == "V100 notes\n"
    assert _changes(run) == []


@pytest.mark.parametrize("new_name", [None, "cli-version-string"], ids=["file", "name-and-file"])
def test_a_renamed_patch_file_is_reported_and_taken(applied, new_name):
    project, run = applied
    old = project / "patches" / "cli-version.patch"
    new = project / "patches" / "0004-cli-version.patch"
    shutil.move(old, new)
    series = project / "series.yaml"
    text = series.read_text().replace("file: cli-version.patch", "file: 0004-cli-version.patch")
    if new_name:
        text = text.replace("name: cli-version\n", f"name: {new_name}\n")
    series.write_text(text)
    (change,) = _changes(run)
    assert change["kind"] == "renamed" and change["file"] == "0004-cli-version.patch"
    assert change["old_file"] == "cli-version.patch"
    assert change["old"] == ("cli-version" if new_name else None)
    _, _, err = run("export", expect=1)
    assert "renamed outside forkpatch" in err
    before = snapshot(project)
    run("apply")
    assert run("top")[1].strip() == (new_name or "cli-version")
    run("export")
    assert snapshot(project) == before and not old.exists()
    assert _changes(run) == []


def test_entries_reordered_outside_are_refused_then_taken(applied):
    project, run = applied
    series = project / "series.yaml"
    text = series.read_text()
    a, b = _entry_block(text, "odd-width-padding"), _entry_block(text, "eager-block-cast")
    series.write_text(text.replace(a + b, b + a))
    (change,) = _changes(run)
    assert change["kind"] == "moved" and change["applied"]
    _, _, err = run("export", expect=1)
    assert "was moved outside forkpatch" in err
    run("apply")
    assert _changes(run) == []
    run("export")


# ----------------------------------------------------------------------------- both sides


def test_both_sides_changed_is_refused_naming_both(applied):
    project, run = applied
    patch = project / "patches" / "cli-version.patch"
    _edit(patch, "The wheel installs", "The 1Cat wheel installs")
    theirs = patch.read_bytes()
    main = _wt(project) / MAIN
    main.write_text(main.read_text() + "# mine\n")
    (change,) = _changes(run)
    assert (change["kind"], change["side"]) == ("modified", "both")
    _, _, err = run("status")
    assert "the work tree has edits of its own to it: both sides changed" in err
    assert "`forkpatch export --force` keeps the work tree" in err
    for args in (("export",), ("refresh",), ("apply",), ("edit", "capability-floor")):
        _, _, err = run(*args, expect=1)
        assert "patches/cli-version.patch was modified outside forkpatch" in err, args
        assert "both sides changed" in err and "--force" in err, args
        assert patch.read_bytes() == theirs and main.read_text().endswith("# mine\n"), args
    run("refresh", "--force")  # keep the work tree
    assert "+# mine" in patch.read_text() and "1Cat" not in patch.read_text()


def test_skip_changed_saves_own_edits_and_leaves_the_changed_file(applied):
    project, run = applied
    theirs_patch = project / "patches" / "odd-width-padding.patch"
    _edit(theirs_patch, DESC, DESC_THEIRS)
    theirs = theirs_patch.read_bytes()
    main = _wt(project) / MAIN
    main.write_text(main.read_text() + "# mine\n")
    git(_wt(project), "commit", "-qam", "mine")  # a hand commit: part of cli-version
    run("export", expect=1)
    _, out, err = run("export", "--skip-changed")
    assert "odd-width-padding" in err and "1 patch file(s) changed: cli-version" in out
    assert theirs_patch.read_bytes() == theirs
    run("apply")  # no edits of its own left: takes the teammate's file
    run("export")
    assert theirs_patch.read_bytes() == theirs
    assert "+# mine" in (project / "patches" / "cli-version.patch").read_text()
    assert _changes(run) == []


# ----------------------------------------------------------------------------- the record


def _downgrade(project: Path) -> Path:
    """state.json as the previous forkpatch wrote it: version 1, no record of the files."""
    path = project / ".forkpatch" / "state.json"
    data = parse_state(path.read_bytes(), path=path, kind="stack", version=2)
    data.pop("synced")
    path.write_bytes(dump_state("stack", 1, data))
    return path


def test_state_of_the_previous_version_is_upgraded(applied):
    project, run = applied
    path = _downgrade(project)
    assert _changes(run) == []
    run("export")  # in agreement: nothing to refuse, and the record is written
    assert parse_state(path.read_bytes(), path=path, kind="stack", version=2)["synced"]
    patch = project / "patches" / "odd-width-padding.patch"
    _edit(patch, DESC, DESC_THEIRS)
    (change,) = _changes(run)
    assert (change["name"], change["side"]) == ("odd-width-padding", "file")


def test_a_file_changed_before_the_upgrade_is_refused_as_unknown(applied):
    project, run = applied
    _downgrade(project)
    patch = project / "patches" / "odd-width-padding.patch"
    _edit(patch, DESC, DESC_THEIRS)
    (change,) = _changes(run)
    assert (change["name"], change["side"]) == ("odd-width-padding", "unknown")
    _, _, err = run("export", expect=1)
    assert "which side changed is not known" in err
    run("apply", expect=1)
    assert DESC_THEIRS in patch.read_text()
    run("apply", "--force")  # take the file
    assert _changes(run) == []
    run("export")
    assert DESC_THEIRS in patch.read_text()


# ----------------------------------------------------------------------------- a team


def _team(tmp_path: Path, project: Path) -> tuple[ScratchRepo, ScratchRepo]:
    """The project in a team repository (team.git), cloned twice: mine and theirs."""
    seed = ScratchRepo(project, init=True)
    seed.commit("the series")
    bare = tmp_path / "team.git"
    git(tmp_path, "clone", "-q", "--bare", str(project), str(bare))
    mine, theirs = (
        ScratchRepo(tmp_path / "mine", init=False),
        ScratchRepo(tmp_path / "theirs", init=False),
    )
    for clone in (mine, theirs):
        git(tmp_path, "clone", "-q", str(bare), str(clone.path))
    return mine, theirs


def test_a_teammate_entry_pulled_while_a_work_tree_exists(example_project, tmp_path, capsys):
    project, _run = example_project
    mine, theirs = _team(tmp_path, project)
    me = Runner(mine.path, capsys)
    me("apply")
    # The teammate imports a patch below the top and pushes it.
    diff = tmp_path / "notes.diff"
    diff.write_text(
        "Operator notes.\n\ndiff --git a/NOTES.md b/NOTES.md\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/NOTES.md\n@@ -0,0 +1 @@\n+V100 notes\n"
    )
    Runner(theirs.path, capsys)("import", str(diff), "--after", "odd-width-padding")
    theirs.git("add", "-A")
    theirs.commit("notes: operator notes")
    theirs.git("push", "-q", "origin", "HEAD")
    mine.git("pull", "-q", "--ff-only")
    (change,) = _changes(me)
    assert (change["kind"], change["name"], change["side"]) == ("added", "notes", "file")
    me("export", expect=1)
    me("apply")
    assert (mine.path / ".forkpatch" / "worktree" / "NOTES.md").read_text() == "V100 notes\n"
    me("export")
    assert mine.git("status", "--porcelain") == ""


def test_a_record_left_behind_by_a_kill_is_not_an_outside_change(applied):
    """forkpatch killed after writing patches/ and before writing its record: the file
    is what the work tree gives, so neither side has anything to lose."""
    project, run = applied
    state = project / ".forkpatch" / "state.json"
    saved = state.read_bytes()
    main = _wt(project) / MAIN
    main.write_text(main.read_text() + "# mine\n")
    run("refresh")
    state.write_bytes(saved)
    assert [c for c in _changes(run) if c["side"] != "worktree"] == []
    before = snapshot(project)
    run("export")
    run("apply")
    assert (
        snapshot(project) == before
        and "+# mine" in (project / "patches" / "cli-version.patch").read_text()
    )
    assert _changes(run) == []


def test_forkpatch_own_commands_are_not_changes_made_outside(applied, tmp_path):
    """Every command that changes patches/ or series.yaml itself keeps the record."""
    _project, run = applied
    notes = tmp_path / "notes.diff"
    notes.write_text(
        "Operator notes.\n\ndiff --git a/NOTES.md b/NOTES.md\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/NOTES.md\n@@ -0,0 +1 @@\n+V100 notes\n"
    )
    steps = [
        ("import", str(notes), "--after", "odd-width-padding"),
        ("new", "my-fix"),
        ("rename", "my-fix", "v100-fix"),
        ("move", "v100-fix", "--after", "capability-floor"),
        ("pop", "--all"),
        ("push", "--all"),
        ("edit", "odd-width-padding"),
        ("refresh",),
        ("delete", "notes"),
        ("export",),
        ("apply",),
    ]
    for args in steps:
        if args[0] == "delete":
            run("pop", "notes")
        run(*args)
        assert _changes(run) == [], args


def test_rebase_takes_a_pulled_file(applied):
    project, run = applied
    patch = project / "patches" / "odd-width-padding.patch"
    _edit(patch, DESC, DESC_THEIRS)
    _, _, err = run("rebase", "--onto", "v1.3.0")
    assert "`forkpatch rebase` takes into the work tree" in err and "odd-width-padding" in err
    assert DESC_THEIRS in patch.read_text()
    assert DESC_THEIRS.strip() in git(_wt(project), "log", "--format=%B")
    assert _changes(run) == []


def test_rebase_refuses_when_both_sides_changed(applied):
    project, run = applied
    patch = project / "patches" / "cli-version.patch"
    _edit(patch, "The wheel installs", "The 1Cat wheel installs")
    before = snapshot(project)
    main = _wt(project) / MAIN
    main.write_text(main.read_text() + "# mine\n")
    git(_wt(project), "commit", "-qam", "mine")  # part of cli-version, the top
    _, _, err = run("rebase", "--onto", "v1.3.0", expect=1)
    assert "patches/cli-version.patch was modified outside forkpatch" in err
    assert "both sides changed" in err
    assert snapshot(project) == before and main.read_text().endswith("# mine\n")
