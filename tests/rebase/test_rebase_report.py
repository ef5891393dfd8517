"""The rebase report is typed data whose JSON is the report file's format: the file,
`rebase --json` and `to_json()` are one document, in one key order, and what the
report derives (the summary, the dropped patches) agrees with its patches."""

from __future__ import annotations

import json

from forkpatch.project import Project
from forkpatch.rebase import RebaseOptions, rebase
from forkpatch.rebase.report import markdown

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
