"""`check --onto` forecasts every patch past a conflict (issue 14).

Past a conflicting patch, the rest of the series is classified as if it were skipped,
and the patches that share files with it (directly or through patches in between)
also as if it were merged with its conflict markers kept; the others are marked
independent: their outcome is certain whatever happens to the conflict.
"""

from __future__ import annotations

import json

from support.git import replace_once
from support.projects import LINES


def _v2_edits_line_9(fork):
    fork.add_file("a.py", replace_once(LINES, "line 9\n", "line 9 upstream\n"))
    fork.commit("Upstream edits line 9 of a.py")
    fork.tag("v2")


N = 8
FILES = {"a.py": LINES, **{f"f{i}.py": LINES.replace("line", f"f{i}") for i in range(2, N + 1)}}


def test_first_patch_conflicts_and_the_rest_are_independent(scenario):
    """Patch 1 conflicts; patches 2..N touch other files: each gets its real outcome,
    marked independent, and that outcome is what the rebase then gives them."""
    patches = [("p1", {"a.py": replace_once(LINES, "line 9\n", "line 9 ours\n")})]
    for i in range(2, N + 1):
        text = FILES[f"f{i}.py"]
        patches.append(
            (f"p{i}", {f"f{i}.py": replace_once(text, f"f{i} 20\n", f"f{i} 20 patched\n")})
        )
    s = scenario(FILES, patches, _v2_edits_line_9)
    _code, out, err = s.run("check", "--onto", "v2", "--json", expect=3)
    data = json.loads(out)
    assert not data["ok"] and data["conflicts"] == 1
    st = {p["name"]: p for p in data["patches"]}
    assert st["p1"]["status"] == "conflict" and "forecast" not in st["p1"]
    for i in range(2, N + 1):
        p = st[f"p{i}"]
        assert p["status"] == "clean", p
        assert p["forecast"] == {
            "after": "p1",
            "independent": True,
            "depends_on": [],
            "if_merged": None,
        }
    assert f"{N - 1} patch(es) independent of the conflicts" in err
    assert "[8/8] p8 ... clean [forecast: independent]" in err
    # The forecast holds: skipping p1 in the real rebase gives exactly those outcomes.
    s.run("rebase", "--onto", "v2", expect=3)
    _code, out, _err = s.run("rebase", "--skip", "--json")
    done = {p["name"]: p["status"] for p in json.loads(out)["patches"]}
    assert done == {"p1": "skipped", **{f"p{i}": "clean" for i in range(2, N + 1)}}


def test_patches_sharing_files_with_the_conflict_depend_on_it(scenario):
    """p4 shares a.py with p1; p5 shares f5.py with p4 (so depends on p1 through it);
    p6 changes the line next to p1's (it conflicts too); p2, p3 are independent."""
    a1 = replace_once(LINES, "line 9\n", "line 9 ours\n")
    a4 = replace_once(a1, "line 30\n", "line 30 p4\n")
    a6 = replace_once(a4, "line 10\n", "line 10 p6\n")
    files = {**FILES}
    patches = [
        ("p1", {"a.py": a1}),
        ("p2", {"f2.py": replace_once(files["f2.py"], "f2 5\n", "f2 5 p2\n")}),
        ("p3", {"f3.py": replace_once(files["f3.py"], "f3 5\n", "f3 5 p3\n")}),
        ("p4", {"a.py": a4, "f5.py": replace_once(files["f5.py"], "f5 5\n", "f5 5 p4\n")}),
        ("p5", {"f5.py": replace_once(files["f5.py"], "f5 5\n", "f5 5 p4 and p5\n")}),
        ("p6", {"a.py": a6}),
    ]
    s = scenario(files, patches, _v2_edits_line_9)
    _code, out, err = s.run("check", "--onto", "v2", "--json", expect=3)
    data = json.loads(out)
    st = {p["name"]: p for p in data["patches"]}
    assert st["p1"]["status"] == "conflict"
    for name in ("p2", "p3"):
        assert st[name]["forecast"]["independent"] and st[name]["status"] == "clean"
    p4 = st["p4"]
    assert p4["forecast"]["depends_on"] == ["p1"] and not p4["forecast"]["independent"]
    # Without p1 its hunk lands where it was; with p1's markers (lines added above) it
    # lands lower: a real difference between the two ways of resolving p1.
    assert p4["status"] == "clean" and p4["forecast"]["if_merged"] == "offset"
    assert st["p5"]["forecast"]["depends_on"] == ["p1"]  # through p4's f5.py
    assert st["p5"]["status"] == "clean" and st["p5"]["forecast"]["if_merged"] == "clean"
    p6 = st["p6"]
    assert p6["forecast"]["depends_on"] == ["p1"]
    assert p6["status"] == "conflict" and p6["forecast"]["if_merged"] == "conflict"
    assert data["conflicts"] == 2
    assert "p4: depends on p1: clean if skipped, offset if merged" in err


def test_the_stopped_rebase_keeps_the_forecast(scenario):
    """`rebase --json` that stops at the first conflict lists the same forecast as check."""
    patches = [("p1", {"a.py": replace_once(LINES, "line 9\n", "line 9 ours\n")})]
    patches += [("p2", {"f2.py": replace_once(FILES["f2.py"], "f2 5\n", "f2 5 p2\n")})]
    s = scenario(FILES, patches, _v2_edits_line_9)
    _code, check_out, _ = s.run("check", "--onto", "v2", "--json", expect=3)
    _code, out, _err = s.run("rebase", "--onto", "v2", "--json", expect=3)
    stopped = json.loads(out)
    forecast = {p["name"]: p.get("forecast") for p in json.loads(check_out)["patches"]}
    assert {p["name"]: p.get("forecast") for p in stopped["patches"]} == forecast
    s.run("rebase", "--abort")
