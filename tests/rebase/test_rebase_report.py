"""The rebase report is typed data whose JSON is the report file's format: the file,
`rebase --json` and `to_json()` are one document, in one key order, and what the
report derives (the summary, the dropped patches) agrees with its patches."""

from __future__ import annotations

import json
import subprocess

import pytest

from forkpatch.project import Project
from forkpatch.rebase import RebaseOptions, rebase
from forkpatch.rebase.report import markdown, range_diff

TOP_KEYS = [
    "version",
    "kind",
    "from",
    "to",
    "relation",
    "note",
    "options",
    "summary",
    "patches",
    "dropped",
    "changed_files",
]


def test_the_report_file_is_the_typed_reports_json(example_project, tmp_path):
    project, _run = example_project
    result = rebase(Project(project), RebaseOptions(onto="v1.3.0", report_dir=tmp_path / "rep"))
    report = result.report
    stem = tmp_path / "rep" / report.file_stem
    assert stem.name == "rebase-v1.2.1-to-v1.3.0"
    data = (stem.parent / f"{stem.name}.json").read_bytes()
    assert data == (json.dumps(report.to_json(), indent=2) + "\n").encode()
    assert list(json.loads(data)) == TOP_KEYS
    assert (stem.parent / f"{stem.name}.md").read_text(encoding="utf-8") == markdown(report)
    # The rewritten patch: the outcome's keys, then the report's own.
    padding = next(p for p in json.loads(data)["patches"] if p["name"] == "odd-width-padding")
    assert list(padding)[-3:] == ["patch_file", "rewritten", "range_diff"]
    assert "commit" not in padding  # a commit of forkpatch's own store
    assert report.summary == {"clean": 2, "merged": 1, "upstreamed": 1}
    assert [(d.name, d.status) for d in report.dropped] == [("cli-version", "upstreamed")]
    dropped = next(p for p in report.patches if p.name == "cli-version")
    assert dropped.dropped == dropped.outcome.evidence and "patch-id matches" in dropped.why


def test_rebase_json_on_stdout_is_the_report_file(example_project):
    project, run = example_project
    _, out, _ = run("rebase", "--onto", "v1.3.0", "--json")
    reports = project / ".forkpatch" / "reports"
    assert out == (reports / "rebase-v1.2.1-to-v1.3.0.json").read_text(encoding="utf-8")


RANGE_CASES = {
    "a changed line": (b"a\nb\nc\nd\n", b"a\nB\nc\nd\n"),
    "a file that gains lines at both ends": (b"x\n" * 9, b"top\n" + b"x\n" * 9 + b"end\n"),
    "no newline at the end, before": (b"a\nb", b"a\nb\nc\n"),
    "no newline at the end, after": (b"a\nb\n", b"a\nc"),
    "bytes that are not UTF-8, and a NUL": (b"\xff\xfe one\n\0two\n", b"\xff\xfe one\n\0TWO\n"),
    "far apart changes, two hunks": (
        b"".join(b"%d\n" % i for i in range(40)),
        b"".join(b"%d\n" % (i * 100 if i in (2, 35) else i) for i in range(40)),
    ),
    "CRLF lines": (b"a\r\nb\r\n", b"a\r\nc\r\n"),
}


@pytest.mark.parametrize("case", list(RANGE_CASES))
def test_a_range_diff_turns_the_old_file_into_the_new(tmp_path, case):
    """The report's diff of a rewritten file, applied by git to the old file, gives the
    new one; it names the file and the two releases; equal files give none."""
    old, new = RANGE_CASES[case]
    text = range_diff(old, new, name="p.patch", old_label="v1", new_label="v2")
    head, _, hunks = text.partition("\n+++ p.patch (v2)\n")
    assert head == "--- p.patch (v1)" and hunks.startswith("@@ -")
    (tmp_path / "p.patch").write_bytes(old)
    mail = b"--- a/p.patch\n+++ b/p.patch\n" + hunks.encode("utf-8", "surrogateescape")
    if b"\xef\xbf\xbd" not in mail:  # the report shows undecodable bytes replaced
        subprocess.run(
            ["git", "apply", "--unsafe-paths", "-"], input=mail, cwd=tmp_path, check=True
        )
        assert (tmp_path / "p.patch").read_bytes() == new
    assert range_diff(new, new, name="p.patch", old_label="v1", new_label="v2") == ""
