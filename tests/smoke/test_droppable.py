"""`forkpatch droppable` on the example fork: real overlay wheels, real smoke environments.

The example project (tests/support/smoke.py) carries capability-floor, odd-width-padding,
eager-block-cast, cli-version and the vllm-dist-info build step on v1.2.1; at v1.3.0 the
fork took the CLI fix (cli-version is upstreamed there) and edited a line next to the
padding code (odd-width-padding needs a 3-way merge). Without vllm-dist-info,
``importlib.metadata.version("vllm")`` fails, so static.version-metadata shows it needed.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from forkpatch.series import load_series, save_series
from support import smoke
from support.cli import Runner

pytestmark = pytest.mark.slow


def _conditions(project: Path, **conditions: dict[str, object]) -> None:
    """Set drop-when fields (and smoke lists) of patches by name."""
    path = project / "series.yaml"
    s = load_series(path)
    s = s.with_patches(
        [replace(p, **conditions[p.name]) if p.name in conditions else p for p in s.patches]  # type: ignore[arg-type]
    )
    save_series(s, path)


def _snapshot(project: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in [project / "series.yaml", *project.glob("patches/*")]}


@pytest.fixture
def project(example_build, tmp_path) -> Path:
    project = smoke.copy_project(example_build, tmp_path / "project")
    _conditions(
        project,
        **{
            "capability-floor": {"drop_when_passes_without": ("static.cli-version",)},
            "odd-width-padding": {
                "drop_when": "the fork pads odd widths itself",
                "drop_when_passes_without": ("sm70.capability",),
            },
            "cli-version": {
                "drop_when": "the fork reads the CLI version from the package",
                "drop_when_upstreamed": True,
                "smoke": ("static.cli-version",),
            },
            "vllm-dist-info": {
                "drop_when_passes_without": ("static.version-metadata",),
                "smoke": ("static.version-metadata",),
            },
        },
    )
    return project


def test_verdicts_at_the_base(project, example_build, capsys):
    # Without torch the CPU checks are not run for "module torch", not for the tier.
    pytest.importorskip("torch", reason="the verdicts name the tiers a CPU torch leaves out")
    run = Runner(project, capsys)
    before = _snapshot(project)
    _code, out, err = run(
        "droppable", "--base-wheel", str(example_build.base_wheel), "--json", expect=11
    )
    data = json.loads(out)
    got = {p["name"]: p for p in data["patches"]}
    assert data["target"] == "v1.2.1" and data["droppable"] == ["capability-floor"]
    assert got["capability-floor"]["verdict"] == "droppable"
    # its own condition, and the checks of the patches that stay (vllm-dist-info's)
    assert got["capability-floor"]["checks_without_patch"] == {
        "static.cli-version": "passed",
        "static.version-metadata": "passed",
    }
    assert "so do the checks of the patches that stay" in got["capability-floor"]["evidence"]
    # a tier this machine lacks: not evaluated, naming the tier and why
    odd = got["odd-width-padding"]
    assert odd["verdict"] == "not-evaluated" and odd["missing"] == ["tier sm70"]
    assert "sm70.capability (tier sm70) not run" in odd["evidence"]
    assert odd["condition"] == "the fork pads odd widths itself"
    # upstreamed: not at its own base
    cli = got["cli-version"]
    assert cli["verdict"] == "needed" and "not upstream" in cli["evidence"]
    # its own check passes with it and fails without it
    dist = got["vllm-dist-info"]
    assert dist["verdict"] == "needed"
    assert dist["evidence"].startswith("static.version-metadata passes with the patch and failed")
    assert "PackageNotFoundError" in dist["evidence"]
    # no condition, no checks: nothing to evaluate
    assert got["eager-block-cast"]["verdict"] == "not-evaluated"
    assert got["eager-block-cast"]["missing"] == ["condition"]
    assert "droppable     capability-floor" in err
    assert _snapshot(project) == before


def test_verdicts_onto_a_newer_release(project, example_build, tmp_path, capsys):
    from forkpatch.example import build_release_wheel

    run = Runner(project, capsys)
    before = _snapshot(project)
    wheel = build_release_wheel(example_build.fork, "v1.3.0", tmp_path / "release")
    _code, out, _err = run(
        "droppable",
        "capability-floor",
        "cli-version",
        "--onto",
        "v1.3.0",
        "--base-wheel",
        str(wheel),
        "--json",
        expect=11,
    )
    data = json.loads(out)
    got = {p["name"]: p for p in data["patches"]}
    assert list(got) == ["capability-floor", "cli-version"] and data["target"] == "v1.3.0"
    assert got["cli-version"]["verdict"] == "droppable"
    assert got["cli-version"]["evidence"].startswith("upstreamed at v1.3.0: ")
    # built after the in-memory rebase (odd-width-padding merged 3-way there)
    assert got["capability-floor"]["verdict"] == "droppable"
    assert "on v1.3.0" in got["capability-floor"]["evidence"]
    assert _snapshot(project) == before  # the rebase ran in a scratch copy


def test_without_a_wheel_of_the_target_nothing_is_guessed(project, capsys):
    run = Runner(project, capsys)
    _conditions(project, **{"vllm-dist-info": {"drop_when_passes_without": ()}})
    # no --base-wheel and no build.base-wheel: the conditions that need a build are not
    # evaluated; the upstreamed one is, without a build, and exits 11
    _code, out, _err = run("droppable", "--onto", "v1.3.0", "--json", expect=11)
    got = {p["name"]: p for p in json.loads(out)["patches"]}
    assert got["cli-version"]["verdict"] == "droppable"
    assert got["capability-floor"]["verdict"] == "not-evaluated"
    evidence = got["capability-floor"]["evidence"]
    assert "no base wheel of the fork at v1.3.0 (1.3.0)" in evidence
    assert "`forkpatch base-wheel --onto v1.3.0`" in evidence
    # nothing droppable: exit 0
    _code, out, _err = run("droppable", "capability-floor", "--json", expect=0)
    assert json.loads(out)["droppable"] == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["cli-versoin"],
            "no patch named 'cli-versoin' in series.yaml (did you mean 'cli-version'?)",
        ),
        (["--onto", "v9.9.9"], "'v9.9.9' is not a tag, branch or commit of the fork"),
        (["--base-wheel", "missing.whl"], "does not exist"),
    ],
)
def test_bad_requests_fail_clearly(project, capsys, args, message):
    run = Runner(project, capsys)
    code, _out, err = run("droppable", *args, expect=None)
    assert code in (1, 2) and message in err


def test_track_summary_says_what_the_release_makes_droppable(tmp_path, capsys):
    from forkpatch.cli import main
    from support.git import git
    from support.track import make_setup

    setup = make_setup(tmp_path, tag_v130=True)
    _conditions(
        setup.project,
        **{
            "capability-floor": {"drop_when_passes_without": ("static.cli-version",)},
            "vllm-dist-info": {"smoke": ("static.version-metadata",)},
            "cli-version": {"upstream": f"fixed in {git(setup.fork, 'rev-parse', 'v1.3.0')}"},
        },
    )
    git(setup.project, "commit", "-q", "-am", "drop-when conditions")
    args = ["-C", str(setup.project), "track", "--run", "--no-forecast", "--no-publish"]
    code = main([*args, "--out", str(setup.out), "--smoke-tier", "static"])
    err = capsys.readouterr().err
    assert code == 0, err
    summary = (setup.out / "v1.3.0" / "summary.md").read_text()
    section = summary.split("## Droppable at v1.3.0\n\n", 1)[1].split("\n\n", 1)[0]
    lines = section.splitlines()
    assert lines[0].startswith("- `cli-version`: **droppable**, upstreamed at `v1.3.0`")
    assert "- `capability-floor`: **droppable**: `static.cli-version pass(es) without" in section
    assert "- `vllm-dist-info`: needed: `static.version-metadata passes with the patch" in section
    assert "- `eager-block-cast`: not-evaluated: " in section
    upstream = summary.split("Upstream (what each patch sent upstream became):\n\n", 1)[1]
    assert "- `cli-version`: merged, in v1.3.0" in upstream
    assert "- `capability-floor`: unknown (upstream: names no pull/merge request" in upstream
    result = json.loads((setup.out / "v1.3.0" / "result.json").read_text())
    assert result["stages"]["smoke"]["droppable"]["capability-floor"]["verdict"] == "droppable"
    # a second run reads the stages back: the same body, byte for byte
    assert main([*args, "--out", str(setup.out), "--smoke-tier", "static"]) == 0
    assert (setup.out / "v1.3.0" / "summary.md").read_text() == summary
