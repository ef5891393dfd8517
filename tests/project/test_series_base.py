"""series.yaml's ``base:``: a commit, the tag that names it when one does, the branch
a rebase took it from; validated with file:line and "did you mean"; older files (a
branch or a commit id written under ``tag:``) still read."""

from __future__ import annotations

import pytest

from forkpatch.errors import SeriesError
from forkpatch.series import BaseRef, dump_series, parse_series

C = "4e9fdbc807178baa3bc98a1a59af7af7d3b63131"
FORK = "version: 1\nfork:\n  name: f\n  url: /x\n"


def _series(base: str):
    return parse_series(FORK + "base:\n" + base + "patches: []\n", path="series.yaml")


@pytest.mark.parametrize(
    ("base", "want"),
    [
        (f"  tag: v1.2.1\n  commit: {C}\n", BaseRef("v1.2.1", C)),
        (f"  commit: {C}\n", BaseRef("", C)),
        (f"  commit: {C}\n  branch: main\n", BaseRef("", C, "main")),
        (f"  tag: v1.3.0\n  commit: {C}\n  branch: up/next\n", BaseRef("v1.3.0", C, "up/next")),
        # written by an older forkpatch after a rebase onto a commit id
        (f"  tag: {C}\n  commit: {C}\n", BaseRef("", C)),
        (f"  tag: '{C[:10]}'\n  commit: {C}\n", BaseRef("", C)),
        # ... and onto a branch: read as written (the fork says it is no tag)
        (f"  tag: main\n  commit: {C}\n", BaseRef("main", C)),
    ],
    ids=["tag", "commit", "commit+branch", "tag+branch", "legacy-id", "legacy-short", "legacy-br"],
)
def test_the_base_forms_read_and_write_back(base, want):
    s = _series(base)
    assert s.base == want
    text = dump_series(s)
    assert parse_series(text).base == want
    assert ("  tag: " in text) == bool(want.tag)
    assert f"tag: {C}" not in text and f"tag: {C[:10]}" not in text
    assert ("  branch: " in text) == bool(want.branch)


def test_labels_for_messages():
    assert BaseRef("v1.2.1", C).label == "v1.2.1"
    assert BaseRef("", C, "main").label == C[:12]
    assert BaseRef("", C, "main").describe() == f"commit {C[:12]} (branch main)"
    assert BaseRef("", C).describe() == f"commit {C[:12]}"


@pytest.mark.parametrize(
    ("base", "words"),
    [
        (
            f"  tga: v1\n  commit: {C}\n",
            "series.yaml:6: base: unknown key 'tga' (did you mean 'tag'?)",
        ),
        (f"  commit: {C}\n  brnach: main\n", "unknown key 'brnach' (did you mean 'branch'?)"),
        ("  tag: v1\n", "series.yaml:6: base: missing required key 'commit'"),
        (f"  tag: ''\n  commit: {C}\n", "base.tag must not be empty"),
        ("  commit: abc\n", "base.commit must be a full 40-hex commit id, got 'abc'"),
        (f"  commit: {C}\n  branch: [a]\n", "base.branch must be a string"),
    ],
)
def test_bad_bases_name_the_line_and_the_way_out(base, words):
    with pytest.raises(SeriesError) as exc:
        _series(base)
    assert words in str(exc.value)
