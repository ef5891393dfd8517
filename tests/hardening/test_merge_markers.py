"""git's conflict markers in the project's files are named as an unresolved merge.

A `git pull` that conflicts leaves `<<<<<<<` / `=======` / `>>>>>>>` in series.yaml or
a patch file. Such a file used to pass `status`, `apply` and `build-wheel` (markers in
a description), fail with a parse error whose tips led nowhere (markers in a diff), or
be "not valid YAML" on the line after the marker (series.yaml). Every command now
names the file and the marker lines as an unresolved merge, with the ways out:
resolve the markers, or `git checkout --ours/--theirs`, then the forkpatch command that
takes the result. A diff line that adds a marker (`+<<<<<<<`) is not one.
"""

from __future__ import annotations

import subprocess

import pytest

from forkpatch.example import build_release_wheel
from forkpatch.markers import merge_markers
from support.cli import Runner
from support.git import git
from support.projects import copy_example, snapshot
from support.reliability import Row

PATCH = "odd-width-padding"


def _conflict(ours: str, theirs: str, diff3: bool = False) -> str:
    base = "||||||| base\nthe old line\n" if diff3 else ""
    return f"<<<<<<< HEAD\n{ours}{base}=======\n{theirs}>>>>>>> origin/main\n"


def _in_description(text: str) -> str:
    first, rest = text.split("\n", 1)
    return _conflict(first + "\n", "A teammate's first line.\n") + rest


def _in_diff(text: str) -> str:
    lines = text.splitlines(keepends=True)
    i = next(
        n for n, line in enumerate(lines) if line.startswith("+") and not line.startswith("+++")
    )
    lines[i] = _conflict(lines[i], lines[i].replace("+", "+  ", 1), diff3=True)
    return "".join(lines)


def _both(text: str) -> str:
    return _in_diff(_in_description(text))


PATCH_VARIANTS = {"description": _in_description, "diff": _in_diff, "both": _both}
COMMANDS = (("status",), ("status", "--json"), ("apply",), ("push", "--all"), ("build-wheel",))


@pytest.fixture
def example(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    build_release_wheel(ex.fork.path, "v1.2.1", tmp_path / "release")
    return ex


def _cmd(ex, args: tuple[str, ...]) -> tuple[str, ...]:
    if args == ("build-wheel",):
        wheel = next((ex.root / "release").glob("*.whl"))
        return ("build-wheel", "--mode", "overlay", "--base-wheel", str(wheel))
    return args


@pytest.mark.parametrize("variant", sorted(PATCH_VARIANTS))
@pytest.mark.parametrize("applied", [False, True], ids=["no-work-tree", "applied"])
def test_markers_in_a_patch_file_are_an_unresolved_merge(example, variant, applied):
    ex = example
    if applied:
        ex.run("apply")
        ex.run("pop", "--all")
    path = ex.patch(PATCH)
    path.write_text(PATCH_VARIANTS[variant](path.read_text()))
    where = merge_markers(path.read_bytes())
    assert where is not None
    before = snapshot(ex.project)
    for args in COMMANDS:
        if args == ("push", "--all") and not applied:
            continue
        code, out, err = ex.run(*_cmd(ex, args), expect=None)
        assert code == 1, (args, err)
        assert f"patches/{PATCH}.patch:{where[0]}: unresolved merge" in err, (args, err)
        assert f"`git checkout --ours patches/{PATCH}.patch`" in err
        assert f"`git checkout --theirs patches/{PATCH}.patch`" in err
        assert "forkpatch status" in err
        assert "not a valid patch" not in err and "nothing changed" not in err
        assert out == ""
        assert snapshot(ex.project) == before
    assert not (ex.project / "dist").exists() or not list((ex.project / "dist").glob("*.whl"))


SERIES_VARIANTS = {
    "entries": ("  - name: cli-version\n", "  - name: cli-version\n", "  - name: cli-vers\n"),
    "base": ("  tag: v1.2.1\n", "  tag: v1.2.1\n", "  tag: v1.2.2\n"),
    "diff3": ("  - name: capability-floor\n", "  - name: capability-floor\n", "  - name: cf\n"),
}


@pytest.mark.parametrize("variant", sorted(SERIES_VARIANTS))
def test_markers_in_series_yaml_are_named_on_the_marker_line(example, variant):
    ex = example
    old, ours, theirs = SERIES_VARIANTS[variant]
    series = ex.project / "series.yaml"
    text = series.read_text()
    series.write_text(text.replace(old, _conflict(ours, theirs, diff3=variant == "diff3"), 1))
    line = series.read_text().splitlines().index("<<<<<<< HEAD") + 1
    for args in (*COMMANDS, ("export",), ("refresh",), ("top",)):
        code, _out, err = ex.run(*_cmd(ex, args), expect=None)
        assert code == 1, (args, err)
        assert f"series.yaml:{line}: unresolved merge" in err, (args, err)
        assert "not valid YAML" not in err
        assert "`git checkout --theirs series.yaml`" in err


def test_a_marker_a_diff_adds_is_not_a_merge(example):
    ex = example
    ex.run("apply")
    f = ex.wt / "vllm" / "entrypoints" / "cli" / "main.py"
    f.write_text(f.read_text() + "# <<<<<<< not a conflict\n# =======\n# >>>>>>> either\n")
    ex.run("refresh", "--force")  # forkpatch's own marker check asks for --force
    assert merge_markers(ex.patch("cli-version").read_bytes()) is None
    ex.run("status")
    assert merge_markers(b"+<<<<<<< a\n+=======\n+>>>>>>> b\n") is None
    assert merge_markers(b"<<<<<<< a\nonly an opening\n") is None


def _clone_pair(ex, tmp_path):
    """The project as a repository on a bare remote, and two clones of it."""
    git(ex.project, "init", "-q", "-b", "main")
    git(ex.project, "add", "series.yaml", "patches")
    git(ex.project, "commit", "-q", "-m", "the series")
    remote = tmp_path / "team.git"
    git(tmp_path, "clone", "-q", "--bare", str(ex.project), str(remote))
    a, b = tmp_path / "a", tmp_path / "b"
    for c in (a, b):
        git(tmp_path, "clone", "-q", str(remote), str(c))
    return a, b


@pytest.mark.parametrize("side", ["--ours", "--theirs"])
def test_a_real_conflicting_pull_then_the_tip_way_out(example, tmp_path, capsys, side):
    ex = example
    a, b = _clone_pair(ex, tmp_path)
    for clone, words in ((a, "Mine: "), (b, "Theirs: ")):
        p = clone / "patches" / f"{PATCH}.patch"
        p.write_text(words + p.read_text())
        git(clone, "commit", "-q", "-a", "-m", words)
    git(b, "push", "-q", "origin", "main")
    pulled = subprocess.run(["git", "-C", str(a), "pull", "-q", "--no-rebase"], capture_output=True)
    assert pulled.returncode != 0  # a real conflict
    run = Runner(a, capsys)
    _, _, err = run("status", expect=1)
    assert f"patches/{PATCH}.patch:1: unresolved merge" in err
    # The tip's way out.
    git(a, "checkout", side, f"patches/{PATCH}.patch")
    git(a, "add", f"patches/{PATCH}.patch")
    run("status")
    run("apply")
    want = "Mine: " if side == "--ours" else "Theirs: "
    assert (a / "patches" / f"{PATCH}.patch").read_text().startswith(want)


RELIABILITY = [
    Row(
        "bad input: patch files",
        "git's conflict markers in a patch file (description, diff, both), with and "
        "without a work tree",
        f"{len(PATCH_VARIANTS) * 2} files x {len(COMMANDS)} commands, and a real pull",
        "exit 1: the file and the marker lines named as an unresolved merge, with "
        "resolve / git checkout --ours / --theirs and the command after; nothing written",
    ),
    Row(
        "bad input: series.yaml",
        "git's conflict markers in series.yaml (entries, base, diff3 style)",
        f"{len(SERIES_VARIANTS)} files x {len(COMMANDS) + 3} commands",
        "exit 1: the marker's own line named as an unresolved merge, not as invalid YAML",
    ),
]
