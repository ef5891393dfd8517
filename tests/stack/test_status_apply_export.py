"""End-to-end checks of the foundation commands on the example fork."""

from __future__ import annotations

import json

from support.projects import snapshot


def test_status_json_lists_patches_in_order(example_project):
    _project, run = example_project
    _code, out, _ = run("status", "--json")
    data = json.loads(out)
    assert [p["name"] for p in data["patches"]] == [
        "capability-floor",
        "odd-width-padding",
        "eager-block-cast",
        "cli-version",
    ]
    assert {p["status"] for p in data["patches"]} == {"clean"}
    assert data["base"] == "v1.2.1"


def test_apply_then_export_is_a_no_op(example_project):
    project, run = example_project
    before = snapshot(project)
    run("apply")
    run("export")
    assert snapshot(project) == before
