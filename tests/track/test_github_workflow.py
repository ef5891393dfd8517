"""The GitHub workflow, as far as it can be run without GitHub: actionlint with the
repository's runner labels, every `if:` and input expression evaluated by GitHub's own
evaluator for a scheduled run and for manual runs with and without inputs, and the
jobs' `run:` steps run in order with a stand-in `gh` (a new release, then the next
scheduled run that must do nothing)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO_ROOT
from support.git import git
from support.github import WORKFLOW, WorkflowRun, evaluate, job_if, job_status, load_workflow
from support.servers import index_files, open_pypiserver
from support.track import add_origin, make_setup, tag_release, tool

CONFIG = REPO_ROOT / ".github" / "actionlint.yaml"

# The contexts GitHub gives each kind of run (a manual run without inputs gets the
# inputs' defaults; a scheduled run has none).
EVENTS = {
    "schedule": {"github": {"event_name": "schedule"}, "inputs": {}},
    "dispatch-defaults": {
        "github": {"event_name": "workflow_dispatch"},
        "inputs": {"tag": "", "publish": True, "dry_run": False, "force": False},
    },
    "dispatch-no-publish-dry-run": {
        "github": {"event_name": "workflow_dispatch"},
        "inputs": {"tag": "v1.3.0", "publish": False, "dry_run": True, "force": True},
    },
}


def _lint(*extra: str) -> subprocess.CompletedProcess[str]:
    # actionlint runs shellcheck on the run: scripts when it finds it on PATH.
    path = f"{Path(tool('shellcheck')).parent}:{os.environ['PATH']}"
    return subprocess.run(
        [tool("actionlint"), *extra, str(WORKFLOW)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={**os.environ, "PATH": path},
    )


def test_actionlint_is_clean_with_the_runner_labels():
    proc = _lint("-config-file", str(CONFIG))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Without the configuration the self-hosted labels are unknown: the file matters.
    bare = _lint("-config-file", "/dev/null")
    assert 'label "sm70" is unknown' in bare.stdout and 'label "docker" is unknown' in bare.stdout
    assert (REPO_ROOT / "ci" / "github" / "actionlint.yaml").read_text() == CONFIG.read_text()


def test_the_old_publish_condition_never_published_a_scheduled_run():
    """The bug: `inputs.publish != false` is false without inputs (null == false)."""
    (old,) = evaluate([{"expr": "inputs.publish != false", "context": EVENTS["schedule"]}])
    assert old["value"] is False


@pytest.mark.parametrize("event", list(EVENTS))
def test_env_expressions_for_each_kind_of_run(event):
    wf = load_workflow()
    ctx = {**EVENTS[event], "vars": {}, "secrets": {}}
    names = ["FORKPATCH_TAG", "FORKPATCH_FORCE", "FORKPATCH_NO_PUBLISH", "FORKPATCH_CI_DRY_RUN"]
    exprs = [wf["env"][n].removeprefix("${{").removesuffix("}}").strip() for n in names]
    answers = evaluate([{"expr": e, "context": ctx} for e in exprs])
    got = dict(zip(names, (a["text"] for a in answers), strict=True))
    want = {
        "schedule": {
            "FORKPATCH_TAG": "",
            "FORKPATCH_FORCE": "0",
            "FORKPATCH_NO_PUBLISH": "0",
            "FORKPATCH_CI_DRY_RUN": "0",
        },
        "dispatch-defaults": {
            "FORKPATCH_TAG": "",
            "FORKPATCH_FORCE": "0",
            "FORKPATCH_NO_PUBLISH": "0",
            "FORKPATCH_CI_DRY_RUN": "0",
        },
        "dispatch-no-publish-dry-run": {
            "FORKPATCH_TAG": "v1.3.0",
            "FORKPATCH_FORCE": "1",
            "FORKPATCH_NO_PUBLISH": "1",
            "FORKPATCH_CI_DRY_RUN": "1",
        },
    }[event]
    assert got == want


def _needs(**results: str) -> dict:
    return {
        job: {"result": r.split(":")[0], "outputs": {"status": r.split(":")[1]} if ":" in r else {}}
        for job, r in results.items()
    }


# (job, needs results[:track status]) -> runs? for each kind of run
JOB_CASES = [
    ("build", _needs(track="success:rebased"), True),
    ("build", _needs(track="success:up-to-date"), False),
    ("build", _needs(track="success:unchanged"), False),
    ("build", _needs(track="success:conflict"), False),
    ("open-change", _needs(track="success:conflict", build="skipped"), True),
    ("open-change", _needs(track="success:rebased", build="success"), True),
    ("open-change", _needs(track="success:rebased", build="failure"), True),
    ("open-change", _needs(track="success:up-to-date", build="skipped"), False),
    ("open-change", _needs(track="failure", build="skipped"), False),
    ("smoke", _needs(track="success:rebased", build="success"), True),
    ("smoke", _needs(track="success:rebased", build="skipped"), False),
    ("publish", _needs(track="success:rebased", build="success", smoke="success"), "input"),
    ("publish", _needs(track="success:rebased", build="success", smoke="failure"), False),
    (
        "report",
        _needs(
            track="success:rebased",
            build="success",
            **{"open-change": "success"},
            smoke="success",
            publish="success",
        ),
        True,
    ),
    (
        "report",
        _needs(
            track="success:rebased",
            build="success",
            **{"open-change": "success"},
            smoke="failure",
            publish="skipped",
        ),
        True,
    ),
    # The SM70 runner never came (the job timed out in the queue): the request still
    # gets the final word.
    (
        "report",
        _needs(
            track="success:rebased",
            build="success",
            **{"open-change": "success"},
            smoke="cancelled",
            publish="skipped",
        ),
        True,
    ),
    (
        "report",
        _needs(
            track="success:rebased",
            build="failure",
            **{"open-change": "success"},
            smoke="skipped",
            publish="skipped",
        ),
        False,
    ),
]


@pytest.mark.parametrize("event", list(EVENTS))
def test_job_conditions_for_each_kind_of_run(event):
    jobs = load_workflow()["jobs"]
    requests, wanted = [], []
    for job, needs, runs in JOB_CASES:
        ctx = {**EVENTS[event], "needs": needs, "vars": {}, "secrets": {}}
        requests.append(
            {"expr": job_if(jobs[job].get("if")), "context": ctx, "status": job_status(needs)}
        )
        if runs == "input":  # publish: unless a manual run turned it off
            runs = event != "dispatch-no-publish-dry-run"
        wanted.append((job, runs))
    got = [(job, a["value"]) for (job, _), a in zip(wanted, evaluate(requests), strict=True)]
    assert got == wanted


# The stand-in runs every job on this machine, which has no V100: the sm70 job's
# smoke is accepted without its GPU tiers, as an operator trying the workflow on a
# CPU box would say so (without it the job fails: the test below).
ACCEPT_CPU = "--allow-missing-tier gpu --allow-missing-tier sm70"


@pytest.mark.slow
def test_jobs_run_in_order_with_a_standin_gh(tmp_path):
    with open_pypiserver(tmp_path / "index") as url:
        setup = make_setup(
            tmp_path, tag_v130=False, sections={"publish": {"required-tiers": ["static"]}}
        )
        origin = add_origin(setup)
        tag_release(setup, "v1.3.0")

        def run(event: str, **inputs) -> WorkflowRun:
            r = WorkflowRun(
                root=tmp_path / f"gh-{len(list(tmp_path.glob('gh-*')))}",
                origin=origin,
                event=event,
                inputs=inputs,
                env={
                    "FORKPATCH_BIN": f"{sys.executable} -m forkpatch",
                    "FORKPATCH_FORK_REPO": str(setup.fork),
                    "FORKPATCH_TRACK_ARGS": (
                        f"--smoke-deps none --smoke-with {setup.torch_stub} {ACCEPT_CPU}"
                    ),
                },
                vars={"FORKPATCH_REPO": "team/forkpatch", "FORKPATCH_PUBLISH_TO": url},
                secrets={"FORKPATCH_INDEX_USER": "bot", "FORKPATCH_INDEX_PASSWORD": "s3cret"},
            )
            # The pull requests outlive a run: the stand-in's state goes from run to run.
            r.root.mkdir(parents=True, exist_ok=True)
            if state.exists():
                shutil.copy2(state, r.root / "gh-state.json")
            r.run(load_workflow())
            if (r.root / "gh-state.json").exists():
                shutil.copy2(r.root / "gh-state.json", state)
            return r

        state = tmp_path / "gh-state.json"
        first = run("schedule")
        assert first.ran == ["track", "build", "open-change", "smoke", "publish", "report"], (
            "\n".join(first.logs.values())
        )
        assert all(first.needs[j]["result"] == "success" for j in first.ran), first.logs
        calls = [c[:2] for c in first.gh_calls()]
        assert calls.count(["pr", "create"]) == 1 and calls.count(["pr", "edit"]) == 1, calls
        # Credentials checked before the push, in both change jobs.
        assert calls.count(["api", "repos/team/project"]) == 2
        (pr,) = json.loads(state.read_text())["pulls"]
        assert pr["head"] == "forkpatch/rebase-v1.3.0" and pr["base"] == "main"
        assert (
            "(published)" in pr["body"]
            and pr["title"] == "forkpatch: rebase the series onto v1.3.0"
        )
        (wheel,) = index_files(url)
        assert wheel in pr["body"]
        commit = git(origin, "rev-parse", "forkpatch/rebase-v1.3.0")

        # The next scheduled run: the pull request reports it all; nothing else runs.
        second = run("schedule")
        assert second.ran == ["track"], second.logs
        assert second.needs["track"]["outputs"]["status"] == "unchanged"
        writes = [c for c in second.gh_calls() if c[1] in ("create", "edit")]
        assert writes == []
        assert git(origin, "rev-parse", "forkpatch/rebase-v1.3.0") == commit
        assert len(json.loads(state.read_text())["pulls"]) == 1


@pytest.mark.slow
def test_the_sm70_job_without_a_v100_fails_and_nothing_is_published(tmp_path):
    """The sm70 job asks for the sm70 tier: on a runner where it cannot run (no GPU,
    torch without CUDA, no `smoke.python`) the job is red, publish does not run, and
    the pull request still says the smoke has not run."""
    with open_pypiserver(tmp_path / "index") as url:
        setup = make_setup(
            tmp_path, tag_v130=False, sections={"publish": {"required-tiers": ["static"]}}
        )
        origin = add_origin(setup)
        tag_release(setup, "v1.3.0")
        r = WorkflowRun(
            root=tmp_path / "gh-0",
            origin=origin,
            event="schedule",
            inputs={},
            env={
                "FORKPATCH_BIN": f"{sys.executable} -m forkpatch",
                "FORKPATCH_FORK_REPO": str(setup.fork),
                "FORKPATCH_TRACK_ARGS": f"--smoke-deps none --smoke-with {setup.torch_stub}",
            },
            vars={"FORKPATCH_REPO": "team/forkpatch", "FORKPATCH_PUBLISH_TO": url},
            secrets={"FORKPATCH_INDEX_USER": "bot", "FORKPATCH_INDEX_PASSWORD": "s3cret"},
        )
        r.root.mkdir(parents=True, exist_ok=True)
        r.run(load_workflow())
        assert r.needs["smoke"]["result"] == "failure", r.logs
        assert "publish" not in r.ran or r.needs["publish"]["result"] == "skipped", r.ran
        assert "tier sm70 did not run (asked for by --tier sm70)" in r.logs["smoke"]
        assert index_files(url) == []
        (pr,) = json.loads((r.root / "gh-state.json").read_text())["pulls"]
        assert pr["title"].endswith("(smoke not run yet)"), pr["title"]
