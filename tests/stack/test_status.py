"""`forkpatch status` (alias `series`): files, +/- lines, clean / offset / fuzz / conflict."""

from __future__ import annotations

import json

from support.git import numbered, write_diff
from support.projects import scratch_project, snapshot

BASE_TEXT = numbered(40)


def _hunk(start: int, old: list[str], new: list[str]) -> str:
    body = "".join(f" {x}\n" for x in old[:3])
    body += f"-{old[3]}\n" + "".join(f"+{x}\n" for x in new)
    body += "".join(f" {x}\n" for x in old[4:7])
    return f"@@ -{start},7 +{start},{6 + len(new)} @@\n{body}"


def _patch(path: str, hunk: str) -> str:
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n{hunk}"


def _lines(a: int, b: int) -> list[str]:
    return [f"line {i}" for i in range(a, b + 1)]


def test_status_reports_each_kind(tmp_path, capsys):
    fork, project, run = scratch_project(
        tmp_path,
        capsys,
        {
            "clean.txt": BASE_TEXT,
            "offset.txt": BASE_TEXT,
            "fuzz.txt": BASE_TEXT,
            "conflict.txt": BASE_TEXT,
        },
    )
    inc = tmp_path / "incoming"
    # clean: exactly where it says.
    write_diff(inc / "a-clean.diff", _patch("clean.txt", _hunk(10, _lines(10, 16), ["new"])))
    # offset: the hunk claims line 4 but its context is at line 10.
    write_diff(inc / "b-offset.diff", _patch("offset.txt", _hunk(4, _lines(10, 16), ["new"])))
    # fuzz: the first context line differs from the file.
    fz = _hunk(10, _lines(10, 16), ["new"]).replace(" line 10\n", " line TEN\n")
    write_diff(inc / "c-fuzz.diff", _patch("fuzz.txt", fz))
    # conflict: the removed line is not in the file.
    cf = _hunk(10, _lines(10, 16), ["new"]).replace("-line 13\n", "-line thirteen\n")
    write_diff(inc / "d-conflict.diff", _patch("conflict.txt", cf))

    # import rewrites what it imports canonically (an offset is gone afterwards) and
    # refuses fuzz and conflicts: write those files by hand, as a developer might.
    run("import", str(inc / "a-clean.diff"))
    for n in ("b-offset", "c-fuzz", "d-conflict"):
        (project / "patches" / f"{n}.patch").write_bytes((inc / f"{n}.diff").read_bytes())
    series = project / "series.yaml"
    series.write_text(
        series.read_text()
        + (
            "  - name: b-offset\n    file: b-offset.patch\n    summary: needs an offset\n"
            "  - name: c-fuzz\n    file: c-fuzz.patch\n    summary: needs fuzz\n"
            "  - name: d-conflict\n    file: d-conflict.patch\n    summary: conflicts\n"
        )
    )
    (project / "patches" / "orphan.patch").write_text("not listed\n")
    before = snapshot(project)

    _, out, err = run("status", "--json", expect=3)
    data = json.loads(out)
    by = {p["name"]: p for p in data["patches"]}
    assert [p["name"] for p in data["patches"]] == ["a-clean", "b-offset", "c-fuzz", "d-conflict"]
    assert {n: p["status"] for n, p in by.items()} == {
        "a-clean": "clean",
        "b-offset": "offset",
        "c-fuzz": "fuzz",
        "d-conflict": "conflict",
    }
    assert by["a-clean"]["files"] == ["clean.txt"]
    assert (by["a-clean"]["added"], by["a-clean"]["removed"]) == (1, 1)
    assert any("offset" in d for d in by["b-offset"]["detail"])
    assert any("fuzz" in d for d in by["c-fuzz"]["detail"])
    assert by["d-conflict"]["conflicts"][0]["path"] == "conflict.txt"
    assert data["orphans"] == ["orphan.patch"]
    assert data["base_commit"] == fork.rev("v1^{commit}")

    # The table is the result: on stdout (`forkpatch status | less`); warnings on stderr.
    _code, out, err = run("series", expect=3)
    for word in (
        "a-clean",
        "clean",
        "b-offset",
        "offset",
        "c-fuzz",
        "fuzz",
        "d-conflict",
        "conflict",
        "+1/-1",
        "clean.txt",
    ):
        assert word in out
    assert "a-clean" not in err
    assert "orphan.patch" in err and "orphan" in err
    assert snapshot(project) == before


def test_import_canonicalises_an_offset_patch(tmp_path, capsys):
    _fork, project, run = scratch_project(tmp_path, capsys, {"f.txt": BASE_TEXT})
    write_diff(tmp_path / "o.diff", _patch("f.txt", _hunk(4, _lines(10, 16), ["new"])))
    run("import", str(tmp_path / "o.diff"))
    # The file keeps its name; its hunk is rewritten where it applies.
    text = (project / "patches" / "o.diff").read_bytes()
    assert b"@@ -10,7 +10,7 @@" in text and b"@@ -4," not in text
    _, out, _ = run("status", "--json")
    assert json.loads(out)["patches"][0]["status"] == "clean"


def test_status_exit_zero_when_all_apply(tmp_path, capsys):
    _fork, _project, run = scratch_project(tmp_path, capsys, {"f.txt": BASE_TEXT})
    write_diff(tmp_path / "x.diff", _patch("f.txt", _hunk(10, _lines(10, 16), ["a", "b"])))
    run("import", str(tmp_path / "x.diff"))
    _, out, _ = run("status", "--json")
    p = json.loads(out)["patches"][0]
    assert (p["status"], p["added"], p["removed"], p["applied"]) == ("clean", 2, 1, None)
    run("apply")
    _, out, _ = run("st", "--json")
    assert json.loads(out)["patches"][0]["applied"] is True
