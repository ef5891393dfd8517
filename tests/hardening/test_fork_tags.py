"""Fork tags are peeled fully and must name a commit.

A tag of a tag (of a tag) of a commit names that commit, wherever forkpatch reads
tags: ``track``'s releases, ``init --base``, ``check --onto``. A tag that names a
tree or a blob is no release: ``track`` passes over it and says so, and every
command given it by name refuses it, naming the tag and what it names. Both for a
local fork (refs read in the clone) and a remote one (``ls-remote``, here a URL that
an ``insteadOf`` rule sends to a local path).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.cli import fp_in
from support.git import ScratchRepo, numbered
from support.projects import scratch_fork
from support.reliability import Row

URL = "https://fork.invalid/fork.git"
SOURCES = ("local fork", "remote fork")

# tag v2.0.0 made by these git tag commands (the last names v2.0.0): what it names
NOT_COMMITS: dict[str, tuple[list[list[str]], str]] = {
    "a light tag of a tree": ([["v2.0.0", "HEAD^{tree}"]], "tree"),
    "an annotated tag of a tree": ([["-a", "-m", "t", "v2.0.0", "HEAD^{tree}"]], "tree"),
    "an annotated tag of a blob": ([["-a", "-m", "b", "v2.0.0", "HEAD:a.txt"]], "blob"),
    "a tag of a tag of a tree": (
        [["-a", "-m", "i", "inner", "HEAD^{tree}"], ["-a", "-m", "o", "v2.0.0", "inner"]],
        "tree",
    ),
}
NESTED: dict[str, list[list[str]]] = {
    "a tag of a tag of a commit": [
        ["-a", "-m", "i", "inner", "HEAD"],
        ["-a", "-m", "o", "v2.0.0", "inner"],
    ],
    "three tag objects deep": [
        ["-a", "-m", "i", "inner", "HEAD"],
        ["-a", "-m", "m", "middle", "inner"],
        ["-a", "-m", "o", "v2.0.0", "middle"],
    ],
}


def _fork(tmp_path: Path, tags: list[list[str]]) -> tuple[ScratchRepo, str]:
    fork = scratch_fork(tmp_path / "fork", {"a.txt": numbered(10)}, tag="v1.0.0")
    fork.add_file("a.txt", numbered(11))
    head = fork.commit("next")
    for args in tags:
        fork.git("tag", *args)
    return fork, head


def _project(tmp_path: Path, fork: ScratchRepo, source: str, monkeypatch) -> tuple[Path, str]:
    url = str(fork.path)
    if source == "remote fork":
        url = URL
        monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
        monkeypatch.setenv("GIT_CONFIG_KEY_0", f"url.{fork.path}/.git.insteadOf")
        monkeypatch.setenv("GIT_CONFIG_VALUE_0", URL)
    project = tmp_path / "project"
    project.mkdir()
    code, _, err = fp_in(project, "init", "--fork-url", url, "--base", "v1.0.0")
    assert code == 0, err
    return project, url


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("case", list(NOT_COMMITS))
def test_a_tag_of_no_commit_is_no_release_and_no_base(case, source, tmp_path, monkeypatch):
    tags, kind = NOT_COMMITS[case]
    fork, _head = _fork(tmp_path, tags)
    project, url = _project(tmp_path, fork, source, monkeypatch)
    named = "tag 'v2.0.0'"

    code, out, err = fp_in(project, "track", "--json")
    assert code == 0, err  # nothing to act on: v2.0.0 is no release
    report = json.loads(out)
    assert report["target"] is None and report["newer"] == [], report
    assert report["not_commits"] == {"v2.0.0": kind}
    assert f"{named} names a {kind}, not a commit" in err

    code, _, err = fp_in(project, "track", "--tag", "v2.0.0", "--json")
    assert code == 2 and f"{named} names a {kind}, not a commit" in err, err

    code, _, err = fp_in(project, "check", "--onto", "v2.0.0")
    assert code == 1 and f"names a {kind}" in err and named in err, err
    code, _, err = fp_in(project, "rebase", "--onto", "v2.0.0")
    assert code == 1 and f"names a {kind}" in err and named in err, err

    other = tmp_path / "other"
    other.mkdir()
    code, _, err = fp_in(other, "init", "--fork-url", url, "--base", "v2.0.0")
    assert code == 1 and f"names a {kind}" in err and named in err, err
    assert not (other / "series.yaml").exists()


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("case", list(NESTED))
def test_a_tag_of_tags_names_the_commit_underneath(case, source, tmp_path, monkeypatch):
    fork, head = _fork(tmp_path, NESTED[case])
    project, url = _project(tmp_path, fork, source, monkeypatch)

    code, out, err = fp_in(project, "track", "--json")
    assert code == 10, err
    report = json.loads(out)
    assert report["target"]["tag"] == "v2.0.0"
    assert report["target"]["commit"] == head

    code, out, err = fp_in(project, "check", "--onto", "v2.0.0", "--json")
    assert code == 0, err
    assert json.loads(out)["onto_commit"] == head

    other = tmp_path / "other"
    other.mkdir()
    code, _, err = fp_in(other, "init", "--fork-url", url, "--base", "v2.0.0")
    assert code == 0, err
    assert f"commit: {head}" in (other / "series.yaml").read_text()


def test_a_base_tag_moved_onto_a_tree_is_named(tmp_path, monkeypatch):
    """(A remote fork's base tag is read from the store until a command fetches.)"""
    fork, _head = _fork(tmp_path, [])
    project, _url = _project(tmp_path, fork, "local fork", monkeypatch)
    fork.git("tag", "-f", "-a", "-m", "moved", "v1.0.0", "HEAD^{tree}")
    before = (project / "series.yaml").read_bytes()
    for command in (["status"], ["apply"]):
        code, _, err = fp_in(project, *command)
        assert code == 1, err
        assert "tag 'v1.0.0'" in err and "names a tree" in err, err
    assert (project / "series.yaml").read_bytes() == before


RELIABILITY = [
    Row(
        "the user's environment",
        "fork tags naming a tree or a blob (light, annotated, through a tag of a tag)",
        f"{len(NOT_COMMITS)} tags x {len(SOURCES)} sources (local, remote) x (track, "
        "track --tag, check --onto, rebase --onto, init --base)",
        "never a release; refused by name with what the tag names; nothing written",
        refused=str(len(NOT_COMMITS) * len(SOURCES) * 4),
    ),
    Row(
        "the user's environment",
        "series.yaml's base tag re-pointed at a tree in the fork",
        "a local fork x (status, apply)",
        "refused naming the tag and what it names; series.yaml unchanged",
        refused="2",
    ),
    Row(
        "the user's environment",
        "fork tags of tags of a commit (two and three tag objects deep)",
        f"{len(NESTED)} tags x {len(SOURCES)} sources x (track, check --onto, init --base)",
        "peeled fully: the commit underneath, never an inner tag object",
    ),
]
