"""`droppable`'s words fit the case: which wheel it has and which it needs, what
build.base-wheel covers, its {tag}/{version} filled in as build-wheel and track fill
them, and why a check did not run.

The example project is on v1.2.1; ``--onto v1.3.0`` evaluates the series rebased there,
which needs the fork's 1.3.0 wheel.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from forkpatch.example import build_release_wheel
from forkpatch.series import load_series, save_series
from support import smoke
from support.cli import Runner

pytestmark = pytest.mark.slow


def _set(project: Path, base_wheel: str | None = None, **conditions: dict[str, object]) -> None:
    path = project / "series.yaml"
    s = load_series(path)
    s = s.with_patches(
        [replace(p, **conditions[p.name]) if p.name in conditions else p for p in s.patches]  # type: ignore[arg-type]
    )
    if base_wheel is not None:
        build = {**s.build.as_mapping(), "base-wheel": base_wheel}
        s = replace(s, sections={**s.sections, "build": build})
    save_series(s, path)


@pytest.fixture
def project(example_build, tmp_path) -> Path:
    project = smoke.copy_project(example_build, tmp_path / "project")
    _set(project, **{"capability-floor": {"drop_when_passes_without": ("static.cli-version",)}})
    return project


def test_a_wheel_of_the_base_given_for_another_target_names_both(project, example_build, capsys):
    run = Runner(project, capsys)
    args = ["droppable", "--onto", "v1.3.0", "--base-wheel", str(example_build.base_wheel)]
    _code, _out, err = run(*args, expect=2)
    assert "is the fork's 1.2.1, but the series rebased onto v1.3.0 is on the fork's 1.3.0" in err
    assert "`forkpatch base-wheel --onto v1.3.0`" in err
    assert "rebase the series onto" not in err and "based on 1.3.0" not in err


def test_build_base_wheel_covers_the_base_only_and_says_so(project, example_build, capsys):
    wheel = project / "release" / example_build.base_wheel.name
    wheel.parent.mkdir()
    shutil.copy2(example_build.base_wheel, wheel)
    _set(project, base_wheel=f"release/{wheel.name}")
    run = Runner(project, capsys)
    _code, out, _err = run("droppable", "capability-floor", "--onto", "v1.3.0", "--json")
    (got,) = json.loads(out)["patches"]
    assert got["verdict"] == "not-evaluated" and got["missing"] == ["build"]
    assert (
        f"build.base-wheel (release/{wheel.name}) is the wheel of the series' base v1.2.1"
        in (got["evidence"])
    )
    assert "{tag} or {version}" in got["evidence"] and "set build.base-wheel" not in got["evidence"]
    # At the base itself it is the right wheel.
    _code, out, _err = run("droppable", "capability-floor", "--json", expect=11)
    assert json.loads(out)["droppable"] == ["capability-floor"]


@pytest.mark.parametrize("placeholder", ["{version}", "{tag}"])
def test_build_base_wheel_placeholders_are_filled_for_each_target(
    project, example_build, tmp_path, capsys, placeholder
):
    release = project / "release"
    for tag in ("v1.2.1", "v1.3.0"):
        built = build_release_wheel(example_build.fork, tag, tmp_path / tag)
        name = tag if placeholder == "{tag}" else tag[1:]
        (release / name).mkdir(parents=True)
        shutil.copy2(built, release / name / built.name)
    _set(project, base_wheel=f"release/{placeholder}/1cat_vllm-{{version}}-py3-none-any.whl")
    run = Runner(project, capsys)
    # build-wheel at the base (auto mode takes the overlay path: a wheel is configured)
    _code, out, _err = run("build-wheel", "--json")
    assert json.loads(out)["mode"] == "overlay"
    # droppable at the base and after the rebase onto v1.3.0: each its own wheel
    for extra in ([], ["--onto", "v1.3.0"]):
        _code, out, _err = run("droppable", "capability-floor", *extra, "--json", expect=11)
        assert json.loads(out)["droppable"] == ["capability-floor"], out


def test_a_check_that_did_not_run_for_want_of_a_module_says_so(project, example_build, capsys):
    _set(
        project,
        **{
            "capability-floor": {"drop_when_passes_without": ("static.capability-floor-cpu",)},
            "odd-width-padding": {
                "drop_when": "the fork pads odd widths itself",
                "smoke": ("static.odd-width-padding-cpu",),
            },
        },
    )
    run = Runner(project, capsys)
    args = ["droppable", "capability-floor", "odd-width-padding", "--smoke-deps", "none"]
    _code, out, _err = run(*args, "--base-wheel", str(example_build.base_wheel), "--json")
    got = {p["name"]: p for p in json.loads(out)["patches"]}
    floor, odd = got["capability-floor"], got["odd-width-padding"]
    assert floor["verdict"] == "not-evaluated" and floor["missing"] == ["module torch"], floor
    assert (
        "static.capability-floor-cpu (tier static) not run: needs the module 'torch'"
        in (floor["evidence"])
    )
    assert "pip install" in floor["evidence"], floor
    assert odd["verdict"] == "not-evaluated", odd
    assert (
        "static.odd-width-padding-cpu: not-run with, not-run without (needs the module "
        in (odd["evidence"])
    )


def test_series_yaml_s_smoke_python_is_the_default_interpreter(project, example_build, capsys):
    """`--smoke-python` defaults to series.yaml's smoke.python, as `smoke` and `track`
    take it: the variant's smoke runs there (here an interpreter that does not exist,
    so the failure names it)."""
    path = project / "series.yaml"
    s = load_series(path)
    smoke_cfg = {**s.smoke.as_mapping(), "python": "/nonexistent/smoke-python3"}
    save_series(replace(s, sections={**s.sections, "smoke": smoke_cfg}), path)
    run = Runner(project, capsys)
    args = ["droppable", "capability-floor", "--base-wheel", str(example_build.base_wheel)]
    _code, out, _err = run(*args, "--json", expect=None)
    (floor,) = json.loads(out)["patches"]
    assert floor["verdict"] == "not-evaluated", floor
    assert "/nonexistent/smoke-python3" in floor["evidence"], floor
