"""Untrusted text is escaped at every boundary: terminal, JUnit XML, Markdown, JSON.

What the wheel under test prints (a smoke check's detail), a patch's file names, a
series.yaml summary, a tag name: each hostile string below must reach the terminal
without a raw control character, JUnit as well-formed XML 1.0, a Markdown table
without a new row or column, and ``--json`` as valid JSON that gives the string back.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from forkpatch import escape
from forkpatch.rebase.plan import Outcome
from forkpatch.rebase.report import Endpoint, RebaseReport, ReportedPatch, ReportOptions, markdown
from forkpatch.smoke import checks
from forkpatch.smoke.report import CheckResult, SmokeReport, WheelEntry, junit_xml
from support.cli import fp
from support.git import file_diff
from support.projects import project_with_patches
from support.reliability import Row

HOSTILE = {
    "clear screen + window title": "\x1b[2J\x1b]0;owned\x07",
    "colour reset left open": "\x1b[31mred",
    "carriage return overwriting the line": "ok\rFAILED",
    "backspaces": "pass\x08\x08\x08\x08fail",
    "NUL byte": "a\x00b",
    "C1 CSI": "\x9b2J",
    "right-to-left override": "txt.\u202eyp.exe",
    "undecodable byte kept by surrogateescape": "caf\udce9",
    "form feed and vertical tab": "a\x0cb\x0bc",
    "DEL": "x\x7fy",
}
# A raw character any of these boundaries must never pass on.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
# What a file name can hold (no NUL; a patch file is UTF-8).
NAMES = [k for k, v in HOSTILE.items() if "\x00" not in v and "\udce9" not in v]
# Markdown table breakers.
MARKDOWN = {
    "a pipe": "a|b",
    "a newline": "a\nb | c |",
    "backticks": "x`` ` ``y",
    "a pipe inside backticks": "`a|b`",
}


@pytest.mark.parametrize("label", list(HOSTILE))
def test_each_helper_leaves_no_raw_control(label: str) -> None:
    text = f"before {HOSTILE[label]} after"
    for helper in (escape.terminal, escape.md_text, escape.md_cell, escape.md_code):
        assert not RAW.search(helper(text)), (helper.__name__, helper(text))
    ET.fromstring(f"<a b='{escape.xml_text(text)}'>{escape.xml_text(text)}</a>".encode())


def _smoke(detail: str) -> SmokeReport:
    reg = checks.registry()
    outcomes = {"static.version-metadata": "failed", "static.cli-version": "error"}
    return SmokeReport(
        wheels=[WheelEntry("a" * 64, file="w.whl")],
        primary_sha256="a" * 64,
        version="1",
        requested_tiers=["static"],
        checks=[
            CheckResult(cid, reg[cid].tier, o, 0.5, f"{detail}\nmore {detail}", [detail])
            for cid, o in outcomes.items()
        ],
        environment={"deps": detail},
        device={},
        patches=[detail],
    )


@pytest.mark.parametrize("label", list(HOSTILE))
def test_junit_from_a_hostile_wheel_is_well_formed(label: str) -> None:
    raw = junit_xml(_smoke(HOSTILE[label]))
    root = ET.fromstring(raw)  # raises on anything XML 1.0 forbids
    failure = next(root.iter("failure"))
    assert not RAW.search(failure.get("message") or "") and not RAW.search(failure.text or "")
    assert "more" in (failure.text or "")


@pytest.fixture(scope="module")
def hostile_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project whose patches touch files named with every hostile string."""
    tmp = tmp_path_factory.mktemp("hostile")
    names = {label: f"vllm/{text}.py" for label, text in HOSTILE.items() if label in NAMES}
    files = {"vllm/x.py": "a\nb\n", **{n: "1\n2\n" for n in names.values()}}
    patches = [
        (f"p{i}", file_diff(name, "1\n2\n", "1\nX\n")) for i, name in enumerate(names.values())
    ]
    project, _fork = project_with_patches(tmp, files, patches)
    return project


@pytest.mark.parametrize("args", [("status",), ("apply",), ("series",)])
def test_hostile_file_names_reach_the_terminal_escaped(
    hostile_project: Path, args: tuple[str, ...]
) -> None:
    proc = fp(hostile_project, *args)
    assert proc.returncode == 0, proc.stderr
    assert not RAW.search(proc.stderr) and not RAW.search(proc.stdout), proc.stderr
    assert "\\x1b[2J" in proc.stdout + proc.stderr  # shown, visibly (the table is a result)


def test_hostile_file_names_stay_json(hostile_project: Path) -> None:
    proc = fp(hostile_project, "status", "--json")
    assert proc.returncode == 0, proc.stderr
    files = {f for p in json.loads(proc.stdout)["patches"] for f in p["files"]}
    assert "vllm/\x1b[2J\x1b]0;owned\x07.py" in files


def test_hostile_summary_and_error_messages_are_escaped(tmp_path: Path) -> None:
    project, _ = project_with_patches(
        tmp_path, {"vllm/x.py": "a\n"}, [("p1", file_diff("vllm/x.py", "a\n", "b\n"))]
    )
    series = project / "series.yaml"
    # A patch file name with an escape sequence that does not exist: the error names it.
    series.write_text(series.read_text().replace("file: p1.patch", 'file: "\\e[2Jp1.patch"'))
    proc = fp(project, "status")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert not RAW.search(proc.stderr), proc.stderr


def _rebase_report(text: str) -> RebaseReport:
    outcome = Outcome(
        name=f"p1{text}", status="upstreamed", files=(f"vllm/{text}.py",), evidence=f"why {text}"
    )
    return RebaseReport(
        source=Endpoint(f"v1{text}", "a" * 40),
        target=Endpoint("v2", "b" * 40),
        relation="forward",
        note=text,
        options=ReportOptions(),
        patches=(ReportedPatch(outcome, f"patches/{text}.patch", f"-{text}\n+{text}\n"),),
        changed_files=(f"patches/{text}.patch",),
    )


@pytest.mark.parametrize("label", list(MARKDOWN) + list(HOSTILE))
def test_markdown_report_keeps_its_table(label: str) -> None:
    text = {**MARKDOWN, **HOSTILE}[label]
    md = markdown(_rebase_report(text))
    assert not RAW.search(md)
    rows = [line for line in md.splitlines() if line.startswith("|")]
    assert len(rows) == 3, md  # header, rule, one patch: a value added no row
    cells = [re.split(r"(?<!\\)\|", row) for row in rows]
    assert len({len(c) for c in cells}) == 1, md  # and no column


RELIABILITY = [
    Row(
        "untrusted text",
        "control characters, escape sequences, bidirectional overrides, undecodable bytes "
        "from the wheel under test and from file names, through each escaping helper and "
        "into JUnit XML",
        f"{len(HOSTILE)} strings x (4 helpers + JUnit)",
        "no raw control character anywhere; JUnit parses as XML 1.0",
    ),
    Row(
        "untrusted text",
        "patch file names carrying those strings, shown by status / apply / series and "
        "status --json; a series.yaml file name with an escape sequence",
        f"{len(NAMES)} names x 4 commands + 1",
        "escaped on the terminal (visibly), unchanged in --json (valid JSON)",
    ),
    Row(
        "untrusted text",
        "Markdown injection in a rebase report (pipes, newlines, backticks) and the strings above",
        f"{len(MARKDOWN) + len(HOSTILE)} values in every field",
        "the report's table keeps its rows and columns; no raw control character",
    ),
]
