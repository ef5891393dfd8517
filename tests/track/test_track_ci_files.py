"""The CI definitions in ci/: schema-valid (check-jsonschema's bundled schemas), wired
to the one driver script with the jobs, runners and secrets the README names, and the
shell scripts shellcheck-clean (every warning level)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support import REPO_ROOT
from support.track import tool

CI = REPO_ROOT / "ci"
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


@pytest.mark.parametrize("kind", ["release", "conflict", "idle"])
def test_gitlab_pipelines_are_valid(tmp_path, kind):
    _check_jsonschema("vendor.gitlab-ci", GITLAB)
    # The act pipeline the track job writes: the common part and one of the kinds.
    act = tmp_path / "act.yml"
    act.write_text(
        'variables:\n  FORKPATCH_TAG: "v1.3.0"\n'
        + (CI / "gitlab" / "act-common.yml").read_text()
        + (CI / "gitlab" / f"act-{kind}.yml").read_text()
    )
    _check_jsonschema("vendor.gitlab-ci", act)


def test_github_workflow_jobs_and_runners():
    wf = yaml.safe_load(WORKFLOW.read_text())
    on = wf[True]  # YAML 1.1 reads the key `on` as True
    assert "schedule" in on and "workflow_dispatch" in on
    jobs = wf["jobs"]
    assert list(jobs) == ["track", "build", "open-change", "smoke", "publish", "report"]
    assert jobs["smoke"]["runs-on"] == ["self-hosted", "linux", "sm70"]
    assert "docker" in jobs["build"]["runs-on"]
    assert "smoke" in jobs["publish"]["needs"]
    env = jobs["publish"]["steps"][-2]["env"]
    assert env["TWINE_PASSWORD"] == "${{ secrets.FORKPATCH_INDEX_PASSWORD }}"
    assert "[publish]" in jobs["publish"]["steps"][-3]["run"]  # twine comes with it
    steps = {"report": "open-change"}
    for name, job in jobs.items():
        runs = [s["run"] for s in job["steps"] if "run" in s]
        assert any(f'"$FORKPATCH_CI" {steps.get(name, name)}' in r for r in runs), name


def test_gitlab_jobs_tags_and_rules():
    gl = yaml.safe_load(GITLAB.read_text())
    assert "workflow" not in gl  # it would stop the team's own pipelines
    assert gl["stages"] == ["track", "act"]
    for job in ("forkpatch-track", "forkpatch-act"):
        assert {"if": '$FORKPATCH_TRACK == "1"'} in gl[job]["rules"]
    assert gl["forkpatch-act"]["trigger"]["include"] == [
        {"artifact": "forkpatch-out/act.yml", "job": "forkpatch-track"}
    ]
    release = yaml.safe_load((CI / "gitlab" / "act-release.yml").read_text())
    assert release["forkpatch-smoke"]["tags"] == ["sm70"]
    assert release["forkpatch-build"]["tags"] == ["docker"]
    for job, step in (
        ("forkpatch-build", "build"),
        ("forkpatch-open-change", "open-change"),
        ("forkpatch-smoke", "smoke"),
        ("forkpatch-publish", "publish"),
        ("forkpatch-report", "open-change"),
    ):
        assert release[job]["script"] == [f'bash "$FORKPATCH_TOOL/ci/forkpatch-ci.sh" {step}']
    for kind in ("conflict", "idle"):
        jobs = yaml.safe_load((CI / "gitlab" / f"act-{kind}.yml").read_text())
        assert not any("tags" in j for j in jobs.values() if isinstance(j, dict))
    common = (CI / "gitlab" / "act-common.yml").read_text()
    assert '"$FORKPATCH_TOOL[publish]"' in common  # twine for the publish job


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


def test_shell_scripts_are_shellcheck_clean():
    scripts = [*sorted(CI.glob("*.sh")), CI.parent / ".ci" / "run"]
    proc = subprocess.run(
        [tool("shellcheck"), *map(str, scripts)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout


def test_readme_team_pipeline_is_the_one_the_tests_run():
    """ci/README.md's team .gitlab-ci.yml is the tests' (bar where the file comes from)."""
    import re

    from support.track import TEAM_PIPELINE

    text = (CI / "README.md").read_text()
    block = re.search(r"## GitLab.*?```yaml\n(.*?)```", text, re.S)
    assert block is not None
    documented = yaml.safe_load(re.sub(r"^   ", "", block.group(1), flags=re.M))
    tested = yaml.safe_load(TEAM_PIPELINE)
    doc_job, test_job = documented["forkpatch"], tested["forkpatch"]
    assert doc_job["rules"] == test_job["rules"]
    for key in ("strategy", "forward"):
        assert doc_job["trigger"][key] == test_job["trigger"][key]
    assert doc_job["trigger"]["include"][0]["file"] == "ci/gitlab-ci.yml"
    assert doc_job["stage"] in documented["stages"]
