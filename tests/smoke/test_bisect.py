"""Integration: `forkpatch smoke --bisect` on the example fork (real overlay builds, real venvs).

The checks used here need no torch and the smoke venvs use ``--deps none``, so
each prefix costs an overlay build and a small venv: seconds.
"""

from __future__ import annotations

import json

import pytest

from forkpatch.series import load_series
from support import smoke
from support.cli import Runner

pytestmark = pytest.mark.slow

_broken_project = smoke.broken_project


def _bisect(run: Runner, build: smoke.ExampleBuild, *target: str) -> tuple[dict, str]:
    """``smoke --bisect [TARGET]`` on the static tier without dependencies: (JSON, stderr)."""
    _, out, err = run(
        "smoke",
        "--bisect",
        *target,
        "--base-wheel",
        str(build.base_wheel),
        "--tier",
        "static",
        "--deps",
        "none",
        "--json",
    )
    return json.loads(out), err


def test_bisect_names_the_patch_that_breaks_a_check(example_build, tmp_path, capsys):
    project = _broken_project(example_build, tmp_path / "project")
    run = Runner(project, capsys)
    data, err = _bisect(run, example_build, "series.yaml")
    assert data["status"] == "found"
    assert "static.cli-version" in data["failing"]
    [culprit] = data["first_bad"]
    assert culprit["patch"] == "break-cli" and culprit["position"] == 3
    assert "static.cli-version" in culprit["checks"]
    assert "broken on purpose" in culprit["details"]["static.cli-version"]
    assert data["fails_without_patches"] == {} and data["not_reproduced"] == []
    # The whole series, the empty prefix, then log2(5 diff patches) -> at most 3 more.
    assert data["builds"] == data["smokes"] == len(data["probes"]) <= 5
    empty = next(p for p in data["probes"] if p["prefix"] == 0)
    assert empty["patches"] == ["vllm-dist-info"]  # build steps are in every prefix
    assert "bisect: first bad patch: 'break-cli'" in err
    assert "patches left, testing prefix 1.." in err
    # The scratch builds never touched the project.
    assert not (project / "dist").exists()


def _broken_wheel(example_build, tmp_path):
    """The broken project and the overlay wheel built from it (in tmp_path/dist)."""
    from forkpatch.project import Project
    from forkpatch.wheels.buildwheel import BuildOptions, build_wheel

    project = _broken_project(example_build, tmp_path / "project")
    opts = BuildOptions(
        mode="overlay", base_wheel=example_build.base_wheel, out_dir=tmp_path / "dist"
    )
    return project, build_wheel(Project(project), opts).wheels[0]


def test_bisect_a_wheel_and_refuse_one_from_another_series(example_build, tmp_path, capsys):
    project, wheel = _broken_wheel(example_build, tmp_path)
    run = Runner(project, capsys)
    # The pristine example wheel does not hold break-cli: a clear refusal, before any build.
    _, _, err = run(
        "smoke",
        "--bisect",
        str(example_build.wheel),
        "--base-wheel",
        str(example_build.base_wheel),
        expect=1,
    )
    assert "was not built from the series in series.yaml" in err
    assert "break-cli" in err

    data, err = _bisect(run, example_build, str(wheel))
    assert data["status"] == "found"
    assert [c["patch"] for c in data["first_bad"]] == ["break-cli"]
    assert data["smokes"] == data["builds"] + 1  # the wheel itself was smoked, not rebuilt
    assert data["reused_report"] is None


def test_bisect_reuses_the_stored_report_of_the_wheel(example_build, tmp_path, capsys):
    from forkpatch.fsutil import file_sha256

    project, wheel = _broken_wheel(example_build, tmp_path)
    run = Runner(project, capsys)
    run("smoke", str(wheel), "--tier", "static", "--deps", "none", expect=1)
    stored = project / ".forkpatch" / "smoke" / f"{file_sha256(wheel)}.json"
    assert stored.is_file()
    data, err = _bisect(run, example_build, str(wheel))
    assert data["reused_report"] == str(stored) and f"taken from {stored}" in err
    assert data["smokes"] == data["builds"]  # only the prefixes were smoked
    assert [c["patch"] for c in data["first_bad"]] == ["break-cli"]
    # A report of other dependencies is not this bisect's evidence: the wheel is smoked.
    _, out, err = run(
        "smoke",
        "--bisect",
        str(wheel),
        "--base-wheel",
        str(example_build.base_wheel),
        "--tier",
        "static",
        "--deps",
        "system",
        "--json",
    )
    data = json.loads(out)
    assert data["reused_report"] is None and data["smokes"] == data["builds"] + 1
    # Nor one that ran fewer tiers than asked (static only, sm70 asked).
    stored.unlink()
    for extra in stored.parent.glob("*.json"):
        extra.unlink()
    run("smoke", str(wheel), "--tier", "static", "--deps", "none", expect=1)
    _, out, _ = run(
        "smoke",
        "--bisect",
        str(wheel),
        "--base-wheel",
        str(example_build.base_wheel),
        "--deps",
        "none",
        "--json",
    )
    assert json.loads(out)["reused_report"] is None


def test_nothing_to_bisect_when_no_check_fails(example_build, tmp_path, capsys):
    project = smoke.copy_project(example_build, tmp_path / "project")
    smoke.set_smoke(project, {p: [] for p in load_series(project / "series.yaml").names()})
    run = Runner(project, capsys)
    data, err = _bisect(run, example_build)
    assert data["status"] == "nothing-to-bisect" and data["failing"] == {}
    assert data["builds"] == 1 and data["first_bad"] == []
    assert "nothing to bisect" in err
    # without --json the verdict is the command's result: on stdout, not on stderr
    _, out, err = run(
        "smoke",
        "--bisect",
        "--base-wheel",
        str(example_build.base_wheel),
        "--tier",
        "static",
        "--deps",
        "none",
    )
    assert out.startswith("bisect: nothing to bisect: no smoke check fails on ")
    assert "nothing to bisect" not in err and "build(s)" in err


def test_bisect_needs_a_base_wheel(example_build, tmp_path, capsys):
    project = smoke.copy_project(example_build, tmp_path / "project")
    _, _, err = Runner(project, capsys)("smoke", "--bisect", "series.yaml", expect=2)
    assert "--base-wheel" in err
