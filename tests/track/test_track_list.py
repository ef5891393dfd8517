"""`forkpatch track` listing on scratch forks: pattern, ordering, pre-releases,
minimum age, unparsable tags, the forecast, and the exit codes."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from forkpatch.cli import main
from forkpatch.errors import SeriesError
from forkpatch.project import Project
from forkpatch.series import load_series, save_series
from forkpatch.track import DEFAULT_PATTERN, list_releases, parse_tag


def _project(tmp_path: Path, fork: Path, base: str = "v1.2.1", **track: object) -> Project:
    from forkpatch.ops import init_project

    project = init_project(
        tmp_path / "project",
        fork_url=str(fork),
        base_tag=base,
        fork_name="f",
        distribution="1cat-vllm",
        fork_override=None,
    )
    if track:
        s = load_series(project.series_path)
        save_series(replace(s, sections={**s.sections, "track": dict(track)}), project.series_path)
        project.reload()
    return project


def _tag_many(repo, *tags: str) -> None:
    for t in tags:
        repo.git("tag", "-a", t, "-m", t)


@pytest.fixture
def fork(scratch_repo):
    scratch_repo.add_file("README.md", "fork\n")
    scratch_repo.commit("init")
    scratch_repo.tag("v1.2.1")
    scratch_repo.add_file("README.md", "fork 2\n")
    scratch_repo.commit("next")
    return scratch_repo


def test_parse_tag():
    pat = re.compile(DEFAULT_PATTERN)
    assert str(parse_tag("v1.10.0", pat)) == "1.10.0"
    assert parse_tag("release-1", pat) is None
    assert parse_tag("v1.2.x", pat) == "1.2.x"  # matches, does not parse


def test_orders_by_version_not_by_name(tmp_path, fork):
    _tag_many(fork, "v1.2.2", "v1.10.0", "v1.9.0", "v1.2.0", "nightly", "v1.2.x")
    report = list_releases(_project(tmp_path, fork.path))
    assert [t.tag for t in report.newer] == ["v1.2.2", "v1.9.0", "v1.10.0"]
    assert report.target is not None and report.target.tag == "v1.10.0"
    assert report.unparsable == ["v1.2.x"]
    assert report.ignored == ["nightly"]
    assert report.exit_code == 10


def test_prereleases_are_held_back_unless_configured(tmp_path, fork):
    _tag_many(fork, "v1.3.0rc1", "v1.3.0.dev2")
    report = list_releases(_project(tmp_path, fork.path))
    assert report.target is None and report.exit_code == 0
    assert [t.tag for t in report.newer] == ["v1.3.0.dev2", "v1.3.0rc1"]
    assert all(t.held_back and t.held_back.startswith("pre-release") for t in report.newer)
    report = list_releases(_project(tmp_path / "b", fork.path, prereleases=True))
    assert report.target is not None and report.target.tag == "v1.3.0rc1"


def test_min_age_holds_back_a_young_tag(tmp_path, fork):
    _tag_many(fork, "v1.3.0")  # tagger date 2026-06-01 (conftest GIT_ENV)
    project = _project(tmp_path, fork.path, **{"min-age-days": 3})
    day = 86400.0
    tagged = 1780272000.0  # 2026-06-01T00:00:00Z
    young = list_releases(project, now=tagged + 1 * day)
    assert young.target is None
    assert "only 1.0 day(s) old" in (young.newer[0].held_back or "")
    old = list_releases(project, now=tagged + 4 * day)
    assert old.target is not None and old.target.tag == "v1.3.0"


def test_custom_pattern_and_a_base_it_does_not_match(tmp_path, fork):
    _tag_many(fork, "release-1.3.0", "v9.0.0")
    fork.git("tag", "-a", "release-1.2.1", "-m", "r", "v1.2.1")
    project = _project(
        tmp_path, fork.path, base="release-1.2.1", pattern=r"^release-(?P<version>\d+(\.\d+)*)$"
    )
    report = list_releases(project)
    assert [t.tag for t in report.newer] == ["release-1.3.0"]
    # A base whose own tag does not match counts from a matching tag at or below its
    # commit (release-1.2.1 names v1.2.1's commit) ...
    other = _project(tmp_path / "b", fork.path, pattern=r"^release-(?P<version>.+)$")
    assert [t.tag for t in list_releases(other).newer] == ["release-1.3.0"]
    # ... and with none there, the pattern is what is wrong: said so.
    fork.git("tag", "-d", "release-1.2.1")
    with pytest.raises(SeriesError, match=r"does not match track\.pattern"):
        list_releases(_project(tmp_path / "c", fork.path, pattern=r"^release-(?P<version>.+)$"))


def test_bad_pattern_is_a_series_error(tmp_path, fork):
    with pytest.raises(SeriesError, match="not a valid regular expression"):
        list_releases(_project(tmp_path, fork.path, pattern="v(?P<version>"))


def test_cli_json_and_the_forecast_names_the_conflicting_patch(tmp_path, example_fork, capsys):
    """The forecast sees a conflict on main before any tag is made."""
    from forkpatch.example import ONLINE, write_example_patches

    project = tmp_path / "project"
    project.mkdir()
    assert (
        main(["-C", str(project), "init", "--fork-url", str(example_fork.path), "--base", "v1.2.1"])
        == 0
    )
    incoming = write_example_patches(example_fork.path, "v1.2.1", tmp_path / "incoming")
    assert main(["-C", str(project), "import", *map(str, incoming)]) == 0
    base_py = example_fork.path / ONLINE / "base.py"
    base_py.write_text(base_py.read_text().replace("return 75\n", "return 80\n"))
    import subprocess

    subprocess.run(
        ["git", "-C", str(example_fork.path), "commit", "-qam", "floor"],
        check=True,
        env={
            "GIT_AUTHOR_NAME": "a",
            "GIT_AUTHOR_EMAIL": "a@b",
            "GIT_COMMITTER_NAME": "a",
            "GIT_COMMITTER_EMAIL": "a@b",
            "PATH": "/usr/bin:/bin",
        },
    )
    capsys.readouterr()
    code = main(["-C", str(project), "track", "--json"])
    out, err = capsys.readouterr()
    assert code == 10, err
    data = json.loads(out)
    assert data["status"] == "new-release" and data["target"]["tag"] == "v1.3.0"
    fc = data["forecast"]
    assert fc["branch"] == "main" and not fc["ok"]
    assert [c["patch"] for c in fc["conflicts"]] == ["capability-floor"]
    assert fc["conflicts"][0]["conflicts"][0]["path"] == f"{ONLINE}/base.py"
    assert "forecast: patch 'capability-floor' conflicts on main" in err


def test_track_branch_setting_picks_the_forecast_branch(tmp_path, fork):
    fork.git("branch", "release/1.3", "v1.2.1")
    from forkpatch.track import fork_branch_head

    project = _project(tmp_path, fork.path, branch="release/1.3")
    assert fork_branch_head(project) == ("release/1.3", fork.rev("v1.2.1^{commit}"))
    assert fork_branch_head(_project(tmp_path / "b", fork.path)) == ("main", fork.rev("main"))


@pytest.mark.parametrize("remote", ["upstream", "1cat", "origin"])
def test_the_forecast_branch_is_found_whatever_the_remote_is_named(tmp_path, fork, remote):
    """A developer's clone with its remote named `upstream` and a topic branch checked
    out: the forecast is on the fork's default branch, not on the topic branch."""
    import subprocess

    from forkpatch.track import fork_branch_head
    from support.git import GIT_ENV

    clone = tmp_path / "clone"
    subprocess.run(
        ["git", "clone", "-q", "-o", remote, str(fork.path), str(clone)],
        check=True,
        env={**GIT_ENV, "PATH": "/usr/bin:/bin"},
    )
    subprocess.run(["git", "-C", str(clone), "checkout", "-qb", "topic", "v1.2.1"], check=True)
    subprocess.run(["git", "-C", str(clone), "branch", "-qD", "main"], check=True)
    assert fork_branch_head(_project(tmp_path, clone)) == ("main", fork.rev("main"))


def test_track_answers_without_a_forecast_when_no_branch_is_found(tmp_path, fork, capsys):
    """No default branch to forecast against (a tags-only mirror): a warning, and the
    release answer still comes (exit 10 for the new release)."""
    fork.tag("v1.3.0", "main")
    fork.git("checkout", "-q", "--detach", "main")
    fork.git("branch", "-qD", "main")
    project = _project(tmp_path, fork.path)
    capsys.readouterr()
    assert main(["-C", str(project.root), "track", "--json"]) == 10
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["forecast"] is None
    assert "v1.3.0" in out
    assert "no forecast: cannot find the default branch" in err and "track.branch" in err


def test_run_options_need_run(tmp_path, fork, capsys):
    project = _project(tmp_path, fork.path)
    assert main(["-C", str(project.root), "track", "--no-publish"]) == 2
    assert main(["-C", str(project.root), "track", "--proposed", "body.md"]) == 2
    assert main(["-C", str(project.root), "track", "--run", "--steps", "bake"]) == 2


@pytest.mark.parametrize(
    ("tag", "warning"),
    [
        ("nightly-2026", "nightly-2026 is not a release tag"),  # does not match track.pattern
        ("v1.3.x", "v1.3.x is not a release tag"),  # matches, not a PEP 440 version
        ("v1.4.0rc1", "v1.4.0rc1 is held back (pre-release"),  # a pre-release
        ("v1.2.0", "v1.2.0 is not newer than the base v1.2.1"),  # older than the base
    ],
)
def test_tag_that_is_not_a_release_warns_as_for_pre_releases(tmp_path, fork, capsys, tag, warning):
    """Issue 11: `track --tag nightly-2026` acted without a word; every tag that is not a
    newer release is named as such, in the listing and in --run."""
    fork.git("tag", "-a", tag, "-m", tag)
    project = _project(tmp_path, fork.path)
    capsys.readouterr()
    code = main(["-C", str(project.root), "track", "--no-forecast", "--tag", tag, "--json"])
    out, err = capsys.readouterr()
    assert code == 10, err
    assert f"warning: {warning}" in err
    data = json.loads(out)
    assert data["target"]["tag"] == tag
    assert data["bot_branch"] == f"forkpatch/rebase-{tag}"
    code = main(
        [
            *("-C", str(project.root), "track", "--run", "--no-forecast", "--tag", tag),
            *("--steps", "rebase", "--out", str(tmp_path / "out")),
        ]
    )
    err = capsys.readouterr().err
    assert f"warning: {warning}" in err


def test_newer_release_tag_gives_no_warning(tmp_path, fork, capsys):
    _tag_many(fork, "v1.3.0")
    project = _project(tmp_path, fork.path)
    capsys.readouterr()
    assert main(["-C", str(project.root), "track", "--no-forecast", "--tag", "v1.3.0"]) == 10
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize("extra", [(), ("--no-forecast",)])
def test_up_to_date_json_is_one_document_and_runs_nothing(tmp_path, fork, capsys, extra):
    """The scheduled pipeline's common case: no newer release. stdout holds exactly one
    JSON document (the report); nothing is run and "up to date" is said once."""
    project = _project(tmp_path, fork.path)
    capsys.readouterr()
    code = main(["-C", str(project.root), "track", "--json", *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)  # one document: json.loads refuses "extra data"
    assert data["status"] == "up-to-date" and data["target"] is None
    assert err.count("up to date") <= 1, err
    assert not (project.root / ".forkpatch" / "track").exists()
