"""The CI definitions in ci/: schema-valid (check-jsonschema's bundled schemas), and
wired to the one driver script with the jobs, runners and secrets the README names."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

CI = Path(__file__).resolve().parents[2] / "ci"
WORKFLOW = CI / "github" / "workflows" / "forkpatch-track.yml"
GITLAB = CI / "gitlab-ci.yml"
DRIVER = CI / "forkpatch-ci.sh"


def _check_jsonschema(schema: str, path: Path) -> None:
    exe = shutil.which("check-jsonschema")
    cmd = [exe] if exe else [sys.executable, "-m", "check_jsonschema"]
    proc = subprocess.run(
        [*cmd, "--builtin-schema", schema, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout


def test_github_workflow_is_valid():
    _check_jsonschema("vendor.github-workflows", WORKFLOW)


def test_gitlab_pipeline_is_valid():
    _check_jsonschema("vendor.gitlab-ci", GITLAB)


def test_github_workflow_jobs_and_runners():
    wf = yaml.safe_load(WORKFLOW.read_text())
    on = wf[True]  # YAML 1.1 reads the key `on` as True
    assert "schedule" in on and "workflow_dispatch" in on
    jobs = wf["jobs"]
    assert list(jobs) == ["track", "build", "smoke", "publish", "open-change"]
    assert jobs["smoke"]["runs-on"] == ["self-hosted", "linux", "sm70"]
    assert "docker" in jobs["build"]["runs-on"]
    assert "smoke" in jobs["publish"]["needs"]
    env = jobs["publish"]["steps"][-2]["env"]
    assert env["TWINE_PASSWORD"] == "${{ secrets.FORKPATCH_INDEX_PASSWORD }}"
    for name, job in jobs.items():
        runs = [s["run"] for s in job["steps"] if "run" in s]
        assert any(f'"$FORKPATCH_CI" {name}' in r for r in runs), name


def test_gitlab_jobs_tags_and_schedule():
    gl = yaml.safe_load(GITLAB.read_text())
    assert gl["stages"] == ["track", "build", "smoke", "publish", "change"]
    assert {"if": '$CI_PIPELINE_SOURCE == "schedule"'} in gl["workflow"]["rules"]
    assert gl["forkpatch-smoke"]["tags"] == ["sm70"]
    assert gl["forkpatch-build"]["tags"] == ["docker"]
    for job, step in (
        ("forkpatch-track", "track"),
        ("forkpatch-build", "build"),
        ("forkpatch-smoke", "smoke"),
        ("forkpatch-publish", "publish"),
        ("forkpatch-open-change", "open-change"),
    ):
        assert gl[job]["script"] == [f'bash "$FORKPATCH_TOOL/ci/forkpatch-ci.sh" {step}']


def test_driver_script_parses_and_explains_itself():
    subprocess.run(["bash", "-n", str(DRIVER)], check=True)
    out = subprocess.run(
        ["bash", str(DRIVER), "--help"], stdout=subprocess.PIPE, text=True, check=True
    ).stdout
    assert "open-change" in out and "FORKPATCH_CI_DRY_RUN" in out
    bad = subprocess.run(
        ["bash", str(DRIVER), "bake"], stderr=subprocess.PIPE, text=True, check=False
    )
    assert bad.returncode == 1 and "unknown step" in bad.stderr


def test_driver_script_is_shellcheck_clean():
    exe = shutil.which("shellcheck")
    if exe is None:
        pytest.skip("shellcheck is not installed")
    proc = subprocess.run(
        [exe, "-S", "warning", str(DRIVER)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout
