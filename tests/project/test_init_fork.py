"""init, the recorded base, the fork source (url / --fork-repo / env), the user's clone."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from support.cli import Runner
from support.git import git
from support.projects import EXAMPLE_NAMES, copy_example, snapshot


def test_init_writes_series_and_patches(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys, with_project=False)
    ex.run(
        "init",
        "--fork-url",
        str(ex.fork.path),
        "--base",
        "v1.2.1",
        "--name",
        "1cat",
        "--distribution",
        "my-dist",
    )
    data = yaml.safe_load((ex.project / "series.yaml").read_text())
    assert data["fork"] == {"name": "1cat", "url": str(ex.fork.path), "distribution": "my-dist"}
    assert data["base"] == {"tag": "v1.2.1", "commit": ex.fork.rev("v1.2.1^{commit}")}
    assert data["patches"] == []
    assert (ex.project / "patches").is_dir()
    # forkpatch's state is git-ignored when the project is a git repository.
    assert ".forkpatch/" in (ex.project / ".gitignore").read_text().splitlines()
    git(ex.project, "init", "-q")
    (ex.project / ".forkpatch" / "probe").write_text("x")
    assert git(ex.project, "check-ignore", ".forkpatch/probe") == ".forkpatch/probe"
    status = git(ex.project, "status", "--porcelain", "--untracked-files=all")
    assert ".forkpatch" not in status and "series.yaml" in status


def test_init_default_name_and_refusals(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys, with_project=False)
    ex.run("init", "--fork-url", str(ex.fork.path), "--base", "v1.2.1")
    data = yaml.safe_load((ex.project / "series.yaml").read_text())
    assert data["fork"]["name"] == "fork"
    assert data["fork"]["distribution"] == "1cat-vllm"
    before = snapshot(ex.project)
    _code, _, err = ex.run("init", "--fork-url", str(ex.fork.path), "--base", "v1.2.0", expect=2)
    assert "already exists" in err
    assert snapshot(ex.project) == before


def test_init_unknown_tag_names_near_tags(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys, with_project=False)
    _, _, err = ex.run("init", "--fork-url", str(ex.fork.path), "--base", "v1.2.9", expect=1)
    assert "tag 'v1.2.9' is not in the fork" in err
    assert "v1.2.1" in err
    assert "Traceback" not in err
    assert not (ex.project / "series.yaml").exists()


def test_init_missing_options_is_usage_error(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys, with_project=False)
    ex.run("init", "--base", "v1.2.1", expect=2)


def test_moved_tag_is_refused(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    recorded = ex.fork.rev("v1.2.1^{commit}")
    before = snapshot(ex.project)
    wt_head = git(ex.wt, "rev-parse", "HEAD")
    # Someone re-tags v1.2.1 on another commit of the fork.
    git(ex.fork.path, "tag", "-f", "-a", "v1.2.1", "-m", "moved", "v1.2.0")
    moved = ex.fork.rev("v1.2.1^{commit}")
    assert moved != recorded
    for cmd in (["status"], ["status", "--json"], ["apply", "--force"]):
        _code, out, err = ex.run(*cmd, expect=1)
        assert "tag 'v1.2.1'" in err
        assert recorded in err and moved in err, err
        assert "Traceback" not in err
        assert out == ""
    assert snapshot(ex.project) == before
    assert git(ex.wt, "rev-parse", "HEAD") == wt_head


def _clone_state(path, bare=False):
    refs = git(path, "for-each-ref", "--format=%(refname) %(objectname)")
    head = git(path, "symbolic-ref", "HEAD") + " " + git(path, "rev-parse", "HEAD")
    status = (
        "" if bare else git(path, "status", "--porcelain", "--ignored", "--untracked-files=all")
    )
    files = sorted(p.name for p in path.iterdir())
    return refs, head, status, files


@pytest.mark.parametrize(("how", "bare"), [("option", False), ("env", True)])
def test_fork_repo_override_and_user_clone_untouched(tmp_path, capsys, monkeypatch, how, bare):
    ex = copy_example(tmp_path, capsys)
    # The user's own clone of the fork, checked out on a branch with local work.
    clone = tmp_path / ("clone.git" if bare else "clone")
    args = ["clone", "-q"] + (["--bare"] if bare else []) + [str(ex.fork.path), str(clone)]
    git(tmp_path, *args)
    if not bare:
        git(clone, "checkout", "-q", "-b", "mywork", "v1.2.0")
        (clone / "scratch.txt").write_text("uncommitted\n")
    # series.yaml names a URL that cannot be reached: the override must be used.
    series = ex.project / "series.yaml"
    series.write_text(
        series.read_text().replace(str(ex.fork.path), "https://forkpatch.invalid/1cat-vllm.git")
    )
    # The store must not rely on the template's fork: move that away.
    ex.fork.path.rename(tmp_path / "fork-gone")
    if how == "env":
        monkeypatch.setenv("FORKPATCH_FORK_REPO", str(clone))
        pre: list[str] = []
    else:
        monkeypatch.delenv("FORKPATCH_FORK_REPO", raising=False)
        pre = ["--fork-repo", str(clone)]
    before = _clone_state(clone, bare)
    run = Runner(ex.project, capsys)
    _, out, _ = run(*pre, "status", "--json")
    assert [p["status"] for p in json.loads(out)["patches"]] == ["clean"] * 4
    run(*pre, "apply")
    run(*pre, "pop", "--all")
    run(*pre, "push", "cli-version")
    run(*pre, "edit", "odd-width-padding")
    (ex.wt / "vllm" / "extra.py").write_text("X = 1\n")
    run(*pre, "refresh")
    run(*pre, "export")
    run(*pre, "pop")
    assert _clone_state(clone, bare) == before
    assert (ex.project / ".forkpatch" / "worktree" / "vllm" / "extra.py").exists()
    # Nothing forkpatch made lives in the user's clone.
    assert "forkpatch" not in git(clone, "for-each-ref")
    assert "forkpatch" not in git(clone, "worktree", "list")


def test_fork_url_unreachable_without_override_is_clear(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("FORKPATCH_FORK_REPO", raising=False)
    monkeypatch.setenv("FORKPATCH_FETCH_TIMEOUT", "20")
    ex = copy_example(tmp_path, capsys, with_project=False)
    _code, _, err = ex.run("init", "--fork-url", str(tmp_path / "nope"), "--base", "v1", expect=1)
    assert "nope" in err and "Traceback" not in err


def test_pip_entry_point_help_version_completion(tmp_path):
    exe = [sys.executable, "-m", "forkpatch"]
    out = subprocess.run([*exe, "--help"], capture_output=True, text=True, check=True).stdout
    for cmd in (
        "init",
        "status",
        "apply",
        "push",
        "pop",
        "top",
        "new",
        "edit",
        "refresh",
        "delete",
        "rename",
        "move",
        "export",
        "import",
    ):
        assert f"  {cmd}" in out, cmd
    assert "_FORKPATCH_COMPLETE" in out
    ver = subprocess.run([*exe, "--version"], capture_output=True, text=True, check=True)
    assert "forkpatch" in ver.stdout
    comp = subprocess.run(
        [*exe],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "_FORKPATCH_COMPLETE": "bash_source"},
    )
    del comp  # `python -m` has another prog name; the console script is checked below
    import shutil as _sh

    script = _sh.which("forkpatch")
    if script is None:
        pytest.skip("the forkpatch console script is not installed (pip install .)")
    src = subprocess.run(
        [script],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "_FORKPATCH_COMPLETE": "bash_source"},
    )
    assert "complete" in src.stdout and "_forkpatch_completion" in src.stdout


def test_example_names(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    _, out, _ = ex.run("series", "--json")
    assert [p["name"] for p in json.loads(out)["patches"]] == EXAMPLE_NAMES


def test_init_ignores_state_and_dist_once(tmp_path, capsys):
    """`init` git-ignores .forkpatch/ and dist/ (build-wheel's output), keeping what the
    .gitignore had and adding nothing twice."""
    ex = copy_example(tmp_path, capsys, with_project=False)
    (ex.project / ".gitignore").write_text("*.pyc\ndist\n")
    ex.run("init", "--fork-url", str(ex.fork.path), "--base", "v1.2.1")
    assert (ex.project / ".gitignore").read_text() == "*.pyc\ndist\n.forkpatch/\n"
    other = tmp_path / "fresh"
    other.mkdir()
    Runner(other, capsys)("init", "--fork-url", str(ex.fork.path), "--base", "v1.2.1")
    assert (other / ".gitignore").read_text().splitlines() == [".forkpatch/", "dist/"]
    git(other, "init", "-q")
    (other / "dist").mkdir()
    (other / "dist" / "x.whl").write_text("x")
    assert git(other, "check-ignore", "dist/x.whl") == "dist/x.whl"
    Runner(other, capsys)("init", "--fork-url", str(ex.fork.path), "--base", "v1.2.1", "--force")
    assert (other / ".gitignore").read_text().splitlines() == [".forkpatch/", "dist/"]


URL = "https://github.com/1CatAI/1Cat-vLLM.git"


@pytest.mark.parametrize(
    "how",
    [
        "the clone is FORKPATCH_FORK_REPO",
        "the clone is --fork-url",
        "a subdirectory, origin is the fork URL",
        "a clone without remotes that holds the base",
        "a linked work tree of the clone",
    ],
)
def test_init_inside_a_clone_of_the_fork_is_refused(tmp_path, capsys, monkeypatch, how):
    """forkpatch never writes into the fork: init refuses a directory inside a clone of
    it, and leaves the clone exactly as it was (no series.yaml, no .gitignore edit)."""
    ex = copy_example(tmp_path, capsys, with_project=False)
    clone = tmp_path / "1Cat-vLLM"
    git(tmp_path, "clone", "-q", str(ex.fork.path), str(clone))
    (clone / ".gitignore").write_text("*.pyc\n")
    git(clone, "add", ".gitignore")
    git(clone, "commit", "-q", "-m", "ignore")
    where, url, pre = clone, URL, []
    if how == "the clone is FORKPATCH_FORK_REPO":
        monkeypatch.setenv("FORKPATCH_FORK_REPO", str(clone))
    elif how == "the clone is --fork-url":
        url = str(clone)
    elif how == "a subdirectory, origin is the fork URL":
        git(clone, "remote", "set-url", "origin", "https://GitHub.com/1CatAI/1Cat-vLLM/")
        where = clone / "vllm"
        pre = ["--fork-repo", str(ex.fork.path)]
    elif how == "a clone without remotes that holds the base":
        git(clone, "remote", "remove", "origin")
        where = clone / "my-patches"  # not there yet: init would create it
        url = str(ex.fork.path)
    else:
        where = tmp_path / "linked"
        git(clone, "worktree", "add", "-q", str(where))
        url = str(clone)
        clone = where
    before = git(clone, "status", "--porcelain", "--ignored", "-uall")
    _, _, err = Runner(tmp_path, capsys)(
        *pre, "-C", str(where), "init", "--fork-url", url, "--base", "v1.2.1", expect=2
    )
    assert "a clone of the fork" in err and "nothing was written" in err, err
    assert "--fork-repo" in err and "tip:" in err
    assert git(clone, "status", "--porcelain", "--ignored", "-uall") == before
    assert (clone / ".gitignore").read_text() == "*.pyc\n"
    assert not (where / "series.yaml").exists() and not (where / ".forkpatch").exists()


def test_init_in_a_team_repository_beside_the_fork_works(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys, with_project=False)
    git(ex.project, "init", "-q")
    git(ex.project, "remote", "add", "origin", "https://git.example.com/team/patches.git")
    ex.run("init", "--fork-url", str(ex.fork.path), "--base", "v1.2.1")
    assert (ex.project / "series.yaml").exists()


def _team_repo(tmp_path, capsys, *, gitignore: str | None):
    """A project repository with series.yaml and patches/ pushed to a bare remote, then
    a teammate's fresh clone of it (``gitignore``: the .gitignore the repository holds,
    None: none committed)."""
    ex = copy_example(tmp_path, capsys)
    (ex.project / ".gitignore").unlink()
    if gitignore is not None:
        (ex.project / ".gitignore").write_text(gitignore)
    git(ex.project, "init", "-q", "-b", "main")
    git(ex.project, "add", "series.yaml", "patches", *([".gitignore"] if gitignore else []))
    git(ex.project, "commit", "-q", "-m", "the series")
    remote = tmp_path / "team.git"
    git(tmp_path, "clone", "-q", "--bare", str(ex.project), str(remote))
    mate = tmp_path / "mate"
    git(tmp_path, "clone", "-q", str(remote), str(mate))
    return ex, mate


@pytest.mark.parametrize("gitignore", [None, "*.pyc\n", "*.pyc\ndist/"])
@pytest.mark.parametrize("args", [(), ("--base", "v1.2.1"), ("--fork-url", "FORK")])
def test_init_in_a_clone_of_the_project_is_idempotent(tmp_path, capsys, gitignore, args):
    ex, mate = _team_repo(tmp_path, capsys, gitignore=gitignore)
    args = tuple(str(ex.fork.path) if a == "FORK" else a for a in args)
    series_before = (mate / "series.yaml").read_bytes()
    patches_before = {p.name: p.read_bytes() for p in (mate / "patches").iterdir()}
    run = Runner(mate, capsys)
    _, out, _err = run("init", *args)
    assert "already a series" in out and "kept as it is" in out
    assert (mate / "series.yaml").read_bytes() == series_before
    assert {p.name: p.read_bytes() for p in (mate / "patches").iterdir()} == patches_before
    lines = (mate / ".gitignore").read_text().splitlines()
    assert ".forkpatch/" in lines and ("dist/" in lines or "dist" in lines)
    for keep in (gitignore or "").splitlines():
        assert keep in lines  # the team's own lines stay, in their order
    # What forkpatch writes is ignored in the clone.
    (mate / ".forkpatch").mkdir(exist_ok=True)
    (mate / ".forkpatch" / "probe").write_text("x")
    (mate / "dist").mkdir()
    (mate / "dist" / "w.whl").write_text("x")
    assert git(mate, "check-ignore", ".forkpatch/probe", "dist/w.whl").split() == [
        ".forkpatch/probe",
        "dist/w.whl",
    ]
    # Again: nothing changes.
    before = snapshot(mate)
    gi = (mate / ".gitignore").read_bytes()
    run("init", *args)
    assert snapshot(mate) == before and (mate / ".gitignore").read_bytes() == gi
    # The clone is a working project.
    _, out, _ = run("status", "--json")
    assert [p["status"] for p in json.loads(out)["patches"]] == ["clean"] * 4


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--base", "v1.2.0"), ["--base 'v1.2.0'", "'v1.2.1'"]),
        (("--fork-url", "/elsewhere/fork.git"), ["--fork-url '/elsewhere/fork.git'"]),
    ],
)
def test_init_in_a_clone_with_other_options_is_refused(tmp_path, capsys, args, words):
    _ex, mate = _team_repo(tmp_path, capsys, gitignore=None)
    before = snapshot(mate)
    _, _, err = Runner(mate, capsys)("init", *args, expect=2)
    for w in [*words, "already exists", "nothing was changed", "forkpatch init"]:
        assert w in err, err
    assert snapshot(mate) == before and not (mate / ".gitignore").exists()


def test_init_in_a_clone_with_a_broken_series_names_the_line(tmp_path, capsys):
    _ex, mate = _team_repo(tmp_path, capsys, gitignore=None)
    (mate / "series.yaml").write_text((mate / "series.yaml").read_text() + "bogus: 1\n")
    _, _, err = Runner(mate, capsys)("init", expect=1)
    assert "series.yaml:" in err and "bogus" in err
    assert not (mate / ".gitignore").exists()


def test_init_without_series_still_needs_its_options(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys, with_project=False)
    for args, missing in (((), "--fork-url URL and --base TAG"), (("--fork-url", "x"), "--base")):
        _, _, err = ex.run("init", *args, expect=2)
        assert missing in err
        assert not (ex.project / "series.yaml").exists()
