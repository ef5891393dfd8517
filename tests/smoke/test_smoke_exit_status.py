"""`forkpatch smoke`'s exit status is true: a tier it was asked for that did not run is
exit 5, never 0.

Asked for means `--tier` (and the tiers below it: they are cumulative) and
series.yaml's `smoke.required-tiers`. A tier that ran incomplete (some of its checks
could not run) did not run fully. `--allow-missing-tier TIER` accepts it, with a
warning; the report says the tier did not run either way. A failed check is exit 1,
whatever else did not run.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from support import smoke
from support.cli import Runner

pytestmark = pytest.mark.slow


def _cuda() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def _error(err: str) -> str:
    """The error forkpatch ended with (the report above it names every tier)."""
    return err.rpartition("error: ")[2]


def _smoke(example_build, tmp_path, capsys, *args, sections=None, expect):
    project = smoke.copy_project(example_build, tmp_path / "project")
    if sections:
        smoke.set_smoke(project, {}, sections=sections)
    _, out, err = Runner(project, capsys)(
        "smoke", str(example_build.wheel), "--json", *args, expect=expect
    )
    return json.loads(out), err


def test_without_torch_every_tier_that_did_not_run_is_named(example_build, tmp_path, capsys):
    # --deps none: the environment holds the wheels alone, no torch; one patch names
    # a check that needs torch.
    project = smoke.copy_project(example_build, tmp_path / "project")
    smoke.set_smoke(project, {"odd-width-padding": ["static.odd-width-padding-cpu"]})
    run = Runner(project, capsys)
    _, out, err = run("smoke", str(example_build.wheel), "--deps", "none", "--json", expect=5)
    data = json.loads(out)
    assert data["passed"] is True  # nothing failed: the report stays what it was
    status = data["tiers"]["status"]
    assert (status["static"], status["gpu"], status["sm70"]) == ("incomplete", "not-run", "not-run")
    assert "error: tier static ran incomplete (asked for by --tier sm70): 1 of 6 check(s)" in err
    assert "static.odd-width-padding-cpu" in err
    assert "tier gpu did not run (asked for by --tier sm70)" in err
    assert "tier sm70 did not run (asked for by --tier sm70)" in err
    assert "--allow-missing-tier static --allow-missing-tier gpu --allow-missing-tier sm70" in err
    # --tier static asks for less: still incomplete, still 5.
    _, _, err = run(
        "smoke", str(example_build.wheel), "--tier", "static", "--deps", "none", expect=5
    )
    assert "tier static ran incomplete (asked for by --tier static)" in err
    assert "tier gpu" not in _error(err) and "tier sm70" not in _error(err)


def test_sm70_asked_on_a_machine_without_a_v100(example_build, tmp_path, capsys):
    if _cuda():
        pytest.skip("this machine has a CUDA device: the gpu tier can run here")
    data, err = _smoke(example_build, tmp_path, capsys, "--tier", "sm70", expect=5)
    assert data["tiers"]["status"]["static"] == "passed"
    assert data["tiers"]["status"]["sm70"] == "not-run"
    assert "tier sm70 did not run (asked for by --tier sm70): " in err
    assert data["tiers"]["not_run"]["sm70"] in err  # the reason the report records
    assert "a Tesla V100 (compute capability 7.0)" in err
    assert "tier static" not in _error(err)  # it ran: not named


def test_required_tiers_of_the_series_are_asked_for(example_build, tmp_path, capsys):
    if _cuda():
        pytest.skip("this machine has a CUDA device: the gpu tier can run here")
    # --tier static alone ran all it was asked: 0.
    data, err = _smoke(example_build, tmp_path / "a", capsys, "--tier", "static", expect=0)
    assert data["tiers"]["status"]["static"] == "passed" and "did not run" not in err
    # The series requires gpu: a static run is not enough.
    data, err = _smoke(
        example_build,
        tmp_path / "b",
        capsys,
        "--tier",
        "static",
        sections={"smoke": {"required-tiers": ["static", "gpu"]}},
        expect=5,
    )
    assert data["tiers"]["status"]["gpu"] == "not-run"
    assert "tier gpu did not run (asked for by series.yaml smoke.required-tiers): " in err
    assert "not requested (--tier static)" in err
    assert "tier sm70" not in _error(err)  # neither asked for nor required


def test_allow_missing_tier_accepts_exactly_the_tiers_it_names(example_build, tmp_path, capsys):
    if _cuda():
        pytest.skip("this machine has a CUDA device: the gpu tier can run here")
    data, err = _smoke(
        example_build, tmp_path / "a", capsys, "--allow-missing-tier", "sm70", expect=5
    )
    assert "tier gpu did not run" in _error(err) and "tier sm70 did" not in _error(err)
    assert "warning: tier sm70 did not run (asked for by --tier sm70): " in err
    assert "[accepted: --allow-missing-tier sm70]" in err
    data, err = _smoke(
        example_build,
        tmp_path / "b",
        capsys,
        "--allow-missing-tier",
        "sm70",
        "--allow-missing-tier",
        "gpu",
        expect=0,
    )
    # Accepted, not hidden: the report and the terminal still say so.
    assert data["tiers"]["status"]["sm70"] == "not-run" and "sm70" in data["tiers"]["not_run"]
    assert "warning: tier gpu did not run (asked for by --tier sm70): " in err
    assert "[accepted: --allow-missing-tier gpu]" in err
    assert "error:" not in err


def test_a_failed_check_is_exit_1_whatever_did_not_run(example_build, tmp_path, capsys):
    project = smoke.copy_project(example_build, tmp_path / "project", edit_description=True)
    _, out, err = Runner(project, capsys)(
        "smoke", str(example_build.wheel), "--deps", "none", "--json", expect=1
    )
    assert json.loads(out)["tiers"]["status"]["sm70"] == "not-run"
    assert "smoke check(s) failed: static.provenance" in err


def test_allow_missing_tier_is_not_for_a_bisect(example_build, tmp_path, capsys):
    project = smoke.copy_project(example_build, tmp_path / "project")
    _, _, err = Runner(project, capsys)(
        "smoke", "--bisect", str(example_build.wheel), "--allow-missing-tier", "sm70", expect=2
    )
    assert "--allow-missing-tier are about one smoke run" in err
