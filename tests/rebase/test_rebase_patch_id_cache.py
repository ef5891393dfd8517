"""The patch-id cache: what the upstream index learnt, kept across calls and rebases.

A ``check`` then a ``rebase`` onto the same release (or a rebase started again after an
abort) asks git once for the range's commits, their ``log -p`` and their patch-ids and
the patches' patch-ids; the next call reads them from ``.forkpatch/cache/patch-ids.json``
and gives the same outcomes, evidence included. A cache that does not check (not JSON,
another seal, fields of the wrong shape, a commit's part claiming another commit) is
ignored whole and replaced; a cache that outgrows its bound drops its oldest entries.
"""

from __future__ import annotations

import json

import pytest

from forkpatch.fsutil import dump_state
from forkpatch.git import Git, init_bare
from forkpatch.rebase.upstream import CACHE_LIMIT, PATCH_ID_CACHE, PatchIdCache
from support.git import GitCalls, replace_once
from support.projects import LINES

FILES = {"a.py": LINES, "b.py": LINES, "c.py": LINES}
A_FIX = replace_once(LINES, "line 20\n", "line 20 fixed\n")
B_FIX = replace_once(LINES, "line 7\n", "line 7 ours\n")
C_FIX = replace_once(LINES, "line 30\n", "line 30 ours\n")


def _series(scenario):
    """p1 is upstream by patch-id (a cherry-pick into v2), p2 applies, p3 conflicts."""

    def upstream(fork) -> None:
        fork.add_file("b.py", "# header\n" + LINES)
        fork.commit("upstream header on b")
        fork.add_file("a.py", A_FIX)
        fork.commit("Fix line 20, cherry-picked")
        fork.add_file("c.py", replace_once(LINES, "line 30\n", "line 30 upstream\n"))
        fork.commit("upstream on c")
        fork.tag("v2")

    return scenario(
        FILES, [("p1", {"a.py": A_FIX}), ("p2", {"b.py": B_FIX}), ("p3", {"c.py": C_FIX})], upstream
    )


ASKED = (" patch-id", "--name-status", "--no-walk")


def _asked(calls: list[str]) -> list[str]:
    return [c for c in calls if any(word in f" {c}" for word in ASKED)]


def test_a_second_call_reads_the_range_and_patch_ids_from_the_cache(
    scenario, tmp_path, monkeypatch
):
    s = _series(scenario)
    calls = GitCalls(tmp_path / "calls")
    monkeypatch.setenv("PATH", calls.path)
    first = s.check("v2", expect=3)
    assert _asked(calls.take()), "the first call asks git"
    cache = s.project / ".forkpatch" / PATCH_ID_CACHE
    assert cache.is_file()
    second = s.check("v2", expect=3)
    assert _asked(calls.take()) == []
    assert second == first
    statuses = {p["name"]: p["status"] for p in second["patches"]}
    assert statuses == {"p1": "upstreamed", "p2": "offset", "p3": "conflict"}
    assert "patch-id matches" in second["patches"][0]["evidence"]
    # The rebase after the check (a hop onto the same range) asks nothing either.
    s.run("rebase", "--onto", "v2", expect=3)
    assert _asked(calls.take()) == []


def _garbled(path):
    good = json.loads(path.read_text())["data"]
    commit = next(iter(good["commits"]))
    other = "f" * 40
    chunk = good["commits"][commit][1]
    return {
        "not json": b"\x00garbage{",
        "another seal": path.read_bytes().replace(b'"sha256": "', b'"sha256": "0', 1),
        "a field of the wrong shape": dump_state("patch-id-cache", 1, {**good, "ranges": [1]}),
        "a bad patch-id": dump_state(
            "patch-id-cache", 1, {**good, "commits": {commit: ["not-an-id", chunk]}}
        ),
        "a part of another commit": dump_state(
            "patch-id-cache", 1, {**good, "commits": {other: ["", chunk]}}
        ),
        "another kind": dump_state("status-cache", 1, good),
    }


@pytest.mark.parametrize(
    "case",
    [
        "not json",
        "another seal",
        "a field of the wrong shape",
        "a bad patch-id",
        "a part of another commit",
        "another kind",
    ],
)
def test_a_cache_that_does_not_check_is_ignored_and_replaced(scenario, tmp_path, monkeypatch, case):
    s = _series(scenario)
    want = s.check("v2", expect=3)
    path = s.project / ".forkpatch" / PATCH_ID_CACHE
    path.write_bytes(_garbled(path)[case])
    calls = GitCalls(tmp_path / "calls")
    monkeypatch.setenv("PATH", calls.path)
    assert s.check("v2", expect=3) == want
    assert _asked(calls.take()), f"{case}: the cache was trusted"
    json.loads(path.read_text())  # written again, whole
    assert s.check("v2", expect=3) == want
    assert _asked(calls.take()) == []


def test_the_cache_stays_within_its_bound_dropping_the_oldest(tmp_path):
    store = init_bare(tmp_path / "store.git")
    path = tmp_path / "cache" / "patch-ids.json"
    cache = PatchIdCache(path, Git(store.git_dir))
    big = b"x" * 200_000
    ids = [f"{i:040x}" for i in range(60)]
    for oid in ids:
        cache.put_commit(oid, "", f"commit {oid}\n".encode() + big)
    cache.save()
    assert path.stat().st_size <= CACHE_LIMIT
    kept = PatchIdCache(path, Git(store.git_dir)).commits(ids)
    assert kept and ids[-1] in kept and ids[0] not in kept
    assert all(kept[c][1] == f"commit {c}\n".encode() + big for c in kept)
