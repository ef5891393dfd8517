"""The GitLab pipeline run by a real CI client: gitlab-ci-local (shell executor,
artifacts isolated between jobs) runs the team's .gitlab-ci.yml with forkpatch as a
child pipeline, against a scratch fork that tags a release, a pypiserver and a fake
GitLab API on 127.0.0.1 (merge requests and issues recorded), as a pipeline schedule
would: new release, re-run, up to date, conflict, the team's own pipeline untouched,
and credentials checked before anything is pushed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from support.git import git
from support.servers import Forge, index_files, open_pypiserver, serve_forge
from support.track import add_origin, add_team_pipeline, gitlab_ci_local, make_setup, tag_release

pytestmark = pytest.mark.slow

SCHEDULE = {"FORKPATCH_TRACK": "1"}  # the variable the pipeline schedule sets
RUNNER_JOBS = ("forkpatch-build", "forkpatch-smoke")  # docker / sm70 runners


def _team(tmp_path: Path, sections: dict | None = None):
    setup = make_setup(tmp_path, tag_v130=False, sections=sections)
    origin = add_origin(setup)
    add_team_pipeline(setup)
    return setup, origin


def _artifacts(setup) -> dict[str, set[str]]:
    """The files each job of the last pipeline shipped as its artifact."""
    root = setup.project / ".gitlab-ci-local" / "artifacts"
    return {
        job.name: {str(p.relative_to(job)) for p in job.rglob("*") if p.is_file()}
        for job in root.iterdir()
    }


def _branch(origin: Path, name: str) -> str | None:
    out = git(origin, "for-each-ref", "--format=%(objectname)", f"refs/heads/{name}")
    return out or None


def test_new_release_then_rerun_then_nothing_new(tmp_path):
    with open_pypiserver(tmp_path / "index") as url:
        setup, origin = _team(tmp_path, {"publish": {"to": url, "required-tiers": ["static"]}})
        with serve_forge(Forge()) as forge:
            # Before the release: the child pipeline runs only the no-op job.
            idle = gitlab_ci_local(setup, forge, origin, **SCHEDULE)
            assert idle.passed("forkpatch-track"), idle.output
            assert idle.job_ran("forkpatch-nothing-new"), idle.output
            assert not any(idle.job_ran(j) for j in RUNNER_JOBS)
            assert forge.sent == []

            tag_release(setup, "v1.3.0")
            run = gitlab_ci_local(setup, forge, origin, **SCHEDULE)
            for job in (
                "team-lint",
                "forkpatch-track",
                "forkpatch-build",
                "forkpatch-open-change",
                "forkpatch-smoke",
                "forkpatch-publish",
                "forkpatch-report",
            ):
                assert run.passed(job), f"{job}\n{run.output}"
            # One merge request, opened when the wheel was built (smoke not run yet),
            # then updated with smoke and publish.
            assert [(m, re.sub(r"projects/\d+", "projects/P", p)) for m, p, _ in forge.sent] == [
                ("POST", "/api/v4/projects/P/merge_requests"),
                ("PUT", "/api/v4/projects/P/merge_requests/1"),
            ]
            opened = forge.sent[0][2]
            assert opened["title"].endswith("(smoke not run yet)")
            assert "**smoke not run** yet" in opened["description"]
            assert opened["source_branch"] == "forkpatch/rebase-v1.3.0"
            assert opened["target_branch"] == "main"
            (mr,) = forge.merge_requests
            assert mr["title"] == "forkpatch: rebase the series onto v1.3.0"
            assert "(published)" in mr["description"] and "forkpatch-state:" in mr["description"]
            (wheel,) = index_files(url)
            assert wheel.startswith("1cat_vllm-1.3.0+fp.") and wheel in mr["description"]
            commit = _branch(origin, "forkpatch/rebase-v1.3.0")
            assert commit is not None
            assert "tag: v1.3.0" in git(origin, "show", f"{commit}:series.yaml")
            # Each job shipped only its own stage's files: nothing arrives twice, so the
            # order in which a job downloads its artifacts cannot matter.
            shipped = _artifacts(setup)
            seen: dict[str, str] = {}
            for job in ("forkpatch-build", "forkpatch-smoke", "forkpatch-publish"):
                for f in shipped[job]:
                    assert f not in seen, f"{f} from {job} and {seen[f]}"
                    seen[f] = job
            assert "forkpatch-out/v1.3.0/stages/smoke.json" in shipped["forkpatch-smoke"]
            assert shipped["forkpatch-publish"] == {"forkpatch-out/v1.3.0/stages/publish.json"}

            # The next scheduled run: the merge request already reports this release
            # with these inputs; no runner-bound job, no write to the forge, same branch.
            again = gitlab_ci_local(setup, forge, origin, **SCHEDULE)
            assert again.passed("forkpatch-track"), again.output
            assert again.job_ran("forkpatch-nothing-new"), again.output
            assert not any(again.job_ran(j) for j in RUNNER_JOBS)
            assert len(forge.sent) == 2 and len(forge.merge_requests) == 1
            assert _branch(origin, "forkpatch/rebase-v1.3.0") == commit
            assert index_files(url) == [wheel]

            # Forced by hand: everything runs again and updates the same request.
            forced = gitlab_ci_local(setup, forge, origin, **SCHEDULE, FORKPATCH_FORCE="1")
            assert forced.passed("forkpatch-report"), forced.output
            assert len(forge.merge_requests) == 1 and forge.sent[-1][0] == "PUT"
            assert index_files(url) == [wheel]


def test_conflict_opens_one_issue_and_asks_no_runner(tmp_path):
    from forkpatch.example import ONLINE

    setup, origin = _team(tmp_path)
    base_py = setup.fork / ONLINE / "base.py"
    base_py.write_text(base_py.read_text().replace("return 75\n", "return 80\n"))
    git(setup.fork, "commit", "-qam", "floor 80")
    tag_release(setup, "v1.3.1")
    with serve_forge(Forge()) as forge:
        run = gitlab_ci_local(setup, forge, origin, **SCHEDULE)
        assert run.passed("forkpatch-open-issue"), run.output
        assert not any(run.job_ran(j) for j in RUNNER_JOBS)
        (issue,) = forge.issues
        assert issue["title"] == "forkpatch: patch 'capability-floor' conflicts with v1.3.1"
        assert f"`{ONLINE}/base.py`" in issue["description"]
        assert forge.merge_requests == [] and _branch(origin, "forkpatch/rebase-v1.3.1") is None
        again = gitlab_ci_local(setup, forge, origin, **SCHEDULE)
        assert again.job_ran("forkpatch-nothing-new"), again.output
        assert len(forge.issues) == 1 and len(forge.sent) == 1


def test_team_pipeline_with_its_own_stages_is_untouched(tmp_path):
    """A push pipeline of the team: its own stages (no track/act), no forkpatch job,
    no 'stage not found'; the schedule runs forkpatch beside the team's jobs."""
    setup, origin = _team(tmp_path)
    with serve_forge(Forge()) as forge:
        push = gitlab_ci_local(setup, forge, origin)
        assert push.rc == 0, push.output
        assert push.passed("team-lint") and push.passed("team-unit"), push.output
        assert "forkpatch" not in push.output.replace(".forkpatch", "")
        assert "not found" not in push.output
        schedule = gitlab_ci_local(setup, forge, origin, **SCHEDULE)
        assert schedule.passed("team-lint") and schedule.passed("forkpatch-track")


def test_a_token_without_the_scopes_fails_before_anything_is_pushed(tmp_path):
    """The merge-request jobs check the token first: one line naming the variable and
    the scopes it lacks, no traceback, no bot branch pushed (the other credential
    failures: tests/track/test_forge.py, on the same driver)."""
    setup, origin = _team(tmp_path)
    tag_release(setup, "v1.3.0")
    with serve_forge(Forge(scopes=("read_api",))) as forge:
        run = gitlab_ci_local(setup, forge, origin, **SCHEDULE)
    message = "FORKPATCH_GITLAB_TOKEN lacks the scope(s) api, write_repository (it has: read_api)"
    lines = [line for line in run.output.splitlines() if "[forkpatch-ci] error:" in line]
    assert lines and all(message in line for line in lines), run.output
    assert "Traceback" not in run.output and "JSONDecodeError" not in run.output
    assert _branch(origin, "forkpatch/rebase-v1.3.0") is None  # nothing was pushed
    assert forge.sent == []
