"""A build step (no diff) in the middle of the series is a first-class stack entry.

The real series has `vllm-dist-info` between packed-repack and cli-version. It
used to be invisible to the stack: `push` "applied" it forever, rename/move left
the top patch unapplied and `push --all` with everything applied complained that
the stack was not a prefix. In the stack it is an empty commit carrying its name.
"""

from __future__ import annotations

import json

import pytest

from forkpatch.series import PatchEntry, load_series, save_series
from support.git import git
from support.projects import copy_example, snapshot

ORDER = [
    "capability-floor",
    "odd-width-padding",
    "eager-block-cast",
    "vllm-dist-info",
    "cli-version",
]


def _with_build_step(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    path = ex.project / "series.yaml"
    series = load_series(path)
    patches = list(series.patches)
    step = PatchEntry(name="vllm-dist-info", build_step="vllm-dist-info", summary="dist alias")
    patches.insert(3, step)
    save_series(series.with_patches(patches), path)
    return ex


def _stack(ex) -> list[str]:
    out = git(ex.wt, "log", "--format=%(trailers:key=Forkpatch-Patch,valueonly)", "v1.2.1..HEAD")
    return [x for x in out.split("\n") if x.strip()][::-1]


def _top(ex) -> str:
    return ex.run("top")[1].strip()


def test_apply_push_pop_top_walk_over_the_build_step(tmp_path, capsys):
    ex = _with_build_step(tmp_path, capsys)
    before = snapshot(ex.project)
    ex.run("apply")
    assert _stack(ex) == ORDER and _top(ex) == "cli-version"
    # The build step's commit changes nothing.
    assert git(ex.wt, "diff", "--stat", "HEAD~2", "HEAD~1") == ""
    _, out, err = ex.run("status", "--json")
    assert [p["applied"] for p in json.loads(out)["patches"]] == [True] * 5
    _, out, _ = ex.run("status")
    assert "vllm-dist-info" in out and "(build step)" in out

    _, _, err = ex.run("push", "--all")
    assert "all patches are already applied" in err and "prefix" not in err
    ex.run("pop")
    assert _top(ex) == "vllm-dist-info"
    ex.run("pop")
    assert _top(ex) == "eager-block-cast"
    ex.run("pop", "--all")
    # One push at a time walks the whole series exactly once.
    seen = []
    for _ in ORDER:
        _, _, err = ex.run("push")
        seen.append(_top(ex))
    assert seen == ORDER
    _, _, err = ex.run("push", expect=2)
    assert "all patches are applied" in err
    ex.run("pop", "vllm-dist-info")
    assert _top(ex) == "vllm-dist-info"
    ex.run("push", "--all")
    assert _stack(ex) == ORDER
    assert snapshot(ex.project) == before


def test_rename_and_move_keep_every_applied_patch_applied(tmp_path, capsys):
    ex = _with_build_step(tmp_path, capsys)
    ex.run("apply")
    ex.run("rename", "cli-version", "cli-fix")
    assert _stack(ex) == [*ORDER[:4], "cli-fix"]
    ex.run("rename", "vllm-dist-info", "dist-alias")
    assert _stack(ex) == [*ORDER[:3], "dist-alias", "cli-fix"]
    _, _, err = ex.run("push", "--all")
    assert "all patches are already applied" in err
    ex.run("move", "cli-fix", "--before", "dist-alias")
    assert _stack(ex) == [*ORDER[:3], "cli-fix", "dist-alias"]
    assert _top(ex) == "dist-alias"
    # A partial stack, and a move across its end: nothing applied gets unapplied.
    ex.run("pop", "eager-block-cast")
    _, _, err = ex.run("move", "dist-alias", "--to", "1")
    assert _stack(ex) == ["dist-alias", *ORDER[:3]]
    ex.run("push", "--all")
    assert _stack(ex) == ["dist-alias", *ORDER[:3], "cli-fix"]
    ex.run("export")
    assert git(ex.wt, "status", "--porcelain") == ""


def test_delete_edit_refresh_new_on_a_build_step(tmp_path, capsys):
    ex = _with_build_step(tmp_path, capsys)
    ex.run("apply")
    before = snapshot(ex.project)
    _, _, err = ex.run("edit", "vllm-dist-info", expect=2)
    assert "build step" in err and "push vllm-dist-info" in err
    assert snapshot(ex.project) == before
    ex.run("pop", "vllm-dist-info")
    _, _, err = ex.run("refresh", expect=2)
    assert "build step" in err and "forkpatch new" in err
    ex.run("new", "after-step")
    assert _stack(ex) == [*ORDER[:4], "after-step"]
    (ex.wt / "vllm" / "after.py").write_text("X = 1\n")
    ex.run("refresh")
    assert (ex.project / "patches" / "after-step.patch").is_file()
    ex.run("pop", "eager-block-cast")
    ex.run("push")
    assert _top(ex) == "vllm-dist-info"
    ex.run("delete", "vllm-dist-info")
    assert _stack(ex) == ORDER[:3]
    names = [p.name for p in load_series(ex.project / "series.yaml").patches]
    assert names == [*ORDER[:3], "after-step", "cli-version"]
    ex.run("push", "--all")
    assert _stack(ex) == [*ORDER[:3], "after-step", "cli-version"]


def test_hand_made_commits_on_a_build_step_are_not_lost(tmp_path, capsys):
    ex = _with_build_step(tmp_path, capsys)
    ex.run("apply")
    ex.run("pop", "vllm-dist-info")
    (ex.wt / "vllm" / "stray.py").write_text("Y = 2\n")
    git(ex.wt, "add", "-A")
    git(ex.wt, "commit", "-q", "-m", "stray")
    for command in (["export"], ["pop"], ["rename", "cli-version", "cli-fix"]):
        _, _, err = ex.run(*command, expect=1)
        assert "vllm-dist-info" in err, err
    _, _, err = ex.run("export", expect=1)
    assert "build step 'vllm-dist-info'" in err and "forkpatch new" in err
    assert f"git -C {ex.wt} reset --soft" in err and "<worktree>" not in err, err


def test_rebase_keeps_the_build_step_in_the_stack(tmp_path, capsys):
    """A build step below a patch that survives the rebase stays applied in the stack."""
    ex = copy_example(tmp_path, capsys)
    path = ex.project / "series.yaml"
    series = load_series(path)
    patches = list(series.patches)
    patches.insert(1, PatchEntry(name="vllm-dist-info", build_step="vllm-dist-info", summary="x"))
    save_series(series.with_patches(patches), path)
    ex.run("apply")
    ex.run("rebase", "--onto", "v1.3.0")
    kept = [p.name for p in load_series(path).patches]
    assert "cli-version" not in kept and kept[1] == "vllm-dist-info"
    assert _stack(ex) == kept
    _, _, err = ex.run("push", "--all")
    assert "all patches are already applied" in err
    ex.run("pop", "--all")
    ex.run("push", "--all")
    assert _stack(ex) == kept


def _with_steps(tmp_path, capsys, at: list[int]):
    ex = copy_example(tmp_path, capsys)
    path = ex.project / "series.yaml"
    series = load_series(path)
    patches = list(series.patches)
    for n, i in enumerate(sorted(at, reverse=True)):
        name = f"step-{n}" if len(at) > 1 else "vllm-dist-info"
        patches.insert(i, PatchEntry(name=name, build_step="vllm-dist-info", summary="dist alias"))
    save_series(series.with_patches(patches), path)
    return ex


@pytest.mark.parametrize(
    ("at", "edit"),
    [
        ([3], "odd-width-padding"),  # the shipped series: the step between two patches above
        ([2], "odd-width-padding"),  # the step right above the edited patch
        ([4], "capability-floor"),  # the step on top
        ([1, 3], "capability-floor"),  # two steps
    ],
)
def test_refresh_of_a_middle_patch_leaves_no_build_step_unsaved(tmp_path, capsys, at, edit):
    ex = _with_steps(tmp_path, capsys, at)
    ex.run("apply")
    ex.run("edit", edit)
    target = {
        "odd-width-padding": "vllm/model_executor/layers/quantization/online/fp8.py",
        "capability-floor": "vllm/model_executor/layers/quantization/online/base.py",
    }[edit]
    f = ex.wt / target
    f.write_text(f.read_text() + "\n# an edit\n")
    ex.run("refresh")
    _, out, err = ex.run("status", "--json")
    doc = json.loads(out)
    assert "unsaved" not in err and "not written to patches/" not in err, err
    assert all(p["applied"] for p in doc["patches"])
    _, out, err = ex.run("status")
    assert "not written to patches/" not in out + err
    # Nothing left for export to write, and no refusal for the step.
    before = snapshot(ex.project)
    ex.run("export")
    assert snapshot(ex.project) == before
    ex.run("pop", "--all")


def test_delete_a_build_step_in_the_middle_re_applies_the_patches_above(tmp_path, capsys):
    ex = _with_build_step(tmp_path, capsys)
    ex.run("apply")
    ex.run("delete", "vllm-dist-info")
    without = [n for n in ORDER if n != "vllm-dist-info"]
    assert _stack(ex) == without
    assert [p.name for p in load_series(ex.project / "series.yaml").patches] == without
    _, out, _ = ex.run("status", "--json")
    assert json.loads(out)["changes"] == []
