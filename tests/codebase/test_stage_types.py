"""The smoke and publish stages: typed results across stage boundaries, and a Project
where one is taken (module sizes: test_code_shape)."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import forkpatch
from forkpatch.smoke.report import SmokeReport
from forkpatch.smoke.runner import SmokeOutcome

SRC = Path(forkpatch.__file__).resolve().parent


def _stage_modules() -> list[Path]:
    return [SRC / "publish.py", *sorted((SRC / "smoke").rglob("*.py"))]


def test_the_smoke_and_publish_stages_take_a_project_not_any():
    loose = []
    for path in _stage_modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            a = node.args
            for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs):
                if arg.arg == "project" and "Project" not in ast.unparse(arg.annotation or arg):
                    loose.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name}")
    assert loose == []


def test_a_smoke_run_hands_on_its_typed_report():
    hints = typing.get_type_hints(SmokeOutcome)
    assert hints["report"] is SmokeReport


def test_publish_never_asks_which_kind_of_target_it_has():
    """Every difference between a directory index and an upload index is a method of the
    Target protocol: no ``isinstance`` on a target class anywhere in the package."""
    targets = {"DirTarget", "IndexTarget"}
    asks = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "isinstance"
                and len(node.args) == 2
                and targets & {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
            ):
                asks.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert asks == []


def test_a_gate_is_frozen_once_made():
    import dataclasses

    import pytest

    from forkpatch.publish import Gate

    field = next(f for f in dataclasses.fields(Gate) if f.name == "staged")
    gate = Gate.__new__(Gate)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(gate, field.name, None)


def test_publish_gates_and_places_a_typed_report():
    """The gate holds the SmokeReport read back; every target takes that report (the
    published copy), never a dict."""
    from forkpatch import publish

    assert typing.get_type_hints(publish.Gate)["report"] is SmokeReport
    for cls in (publish.Target, publish.DirTarget, publish.IndexTarget):
        for method in ("publish", "keep_beside"):
            hints = typing.get_type_hints(getattr(cls, method))
            assert hints["report"] is SmokeReport, (cls.__name__, method)
    assert typing.get_type_hints(publish.Gate.published_report)["return"] is SmokeReport


def test_a_smoke_result_read_back_holds_only_the_words_of_its_sets():
    from forkpatch.track.stages import SmokeRun, stage_from_json, stage_to_json

    run = SmokeRun(
        passed=True,
        tier="sm70",
        runner="v100",
        wheels={"w.whl": "a" * 64},
        report="smoke/report.json",
        tiers={"static": "passed", "sm70": "not-run"},
        not_run={"sm70": "no V100"},
        checks={"static.version-metadata": "passed"},
        failed=(),
    )
    raw = stage_to_json(run)
    assert stage_from_json("smoke", raw) == run
    for key, value in (
        ("tiers", {"static": "green"}),
        ("tiers", {"nightly": "passed"}),
        ("checks", {"static.version-metadata": "ok"}),
        ("checks", ["passed"]),
    ):
        assert stage_from_json("smoke", {**raw, key: value}) is None, (key, value)
