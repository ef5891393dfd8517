"""`forkpatch track --run` stages on the example fork (no smoke): the work directory,
resuming by steps, base-wheel templates and URLs, the bot branch, the summary."""

from __future__ import annotations

import functools
import http.server
import json
import shutil
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from forkpatch.cli import main
from forkpatch.track import (
    MAX_BODY,
    BuildDone,
    ConflictEntry,
    Failed,
    FileConflict,
    RebaseConflict,
    RebaseDone,
    RunInfo,
    RunKey,
    Skipped,
    SmokeRun,
    Stages,
    TagInfo,
    is_final,
    overall_status,
    parse_state_marker,
    stage_from_json,
    stage_to_json,
)
from support.git import git
from support.track import make_setup, tag_release


def _run(setup, *args: str) -> int:
    return main(
        [
            "-C",
            str(setup.project),
            "track",
            "--run",
            "--no-forecast",
            "--out",
            str(setup.out),
            *args,
        ]
    )


def test_stages_resume_across_invocations_and_inputs_change_starts_over(tmp_path, capsys):
    setup = make_setup(tmp_path, tag_v130=True)
    # build before rebase: a usage error that says what to run first
    assert _run(setup, "--steps", "build") == 2
    assert "run the rebase step first" in capsys.readouterr().err
    assert _run(setup, "--steps", "rebase") == 0
    data = json.loads((setup.out / "v1.3.0" / "result.json").read_text())
    assert data["status"] == "rebased" and "build" not in data["stages"]
    assert (setup.out / "latest").read_text().strip() == "v1.3.0"
    assert _run(setup, "--steps", "build") == 0
    data = json.loads((setup.out / "v1.3.0" / "result.json").read_text())
    assert data["status"] == "built"
    summary = (setup.out / "v1.3.0" / "summary.md").read_text()
    assert "overlay build" in summary and "## Smoke\n\n- **smoke not run** yet" in summary
    # The project itself was never touched by the run.
    assert git(setup.project, "status", "--porcelain") == ""
    # A change to the series is new input: the run starts over.
    (setup.project / "patches" / "cli-version.patch").write_bytes(
        (setup.project / "patches" / "cli-version.patch")
        .read_bytes()
        .replace(b"The wheel", b"The 1cat wheel", 1)
    )
    capsys.readouterr()
    assert _run(setup, "--steps", "rebase") == 0
    assert "starting over" in capsys.readouterr().err
    data = json.loads((setup.out / "v1.3.0" / "result.json").read_text())
    assert set(data["stages"]) == {"rebase"}
    assert sorted(p.name for p in (setup.out / "v1.3.0" / "stages").iterdir()) == ["rebase.json"]


def test_base_wheel_from_a_url_template(tmp_path):
    setup = make_setup(tmp_path, tag_v130=True)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(setup.release))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/1cat_vllm-{{version}}-py3-none-any.whl"
        assert _run(setup, "--steps", "rebase,build", "--base-wheel", url) == 0
    finally:
        server.shutdown()
    data = json.loads((setup.out / "v1.3.0" / "result.json").read_text())
    assert data["stages"]["build"]["base_wheel"] == "1cat_vllm-1.3.0-py3-none-any.whl"
    assert (setup.out / "v1.3.0" / "base-wheel" / "1cat_vllm-1.3.0-py3-none-any.whl").is_file()


def test_missing_base_wheel_fails_the_build_with_a_tip(tmp_path, capsys):
    setup = make_setup(tmp_path, tag_v130=True)
    for whl in setup.release.glob("*1.3.0*"):
        whl.unlink()
    assert _run(setup, "--steps", "rebase,build,smoke,publish") == 1
    err = capsys.readouterr().err
    assert "the base wheel for v1.3.0 is not there" in err
    data = json.loads((setup.out / "v1.3.0" / "result.json").read_text())
    assert data["status"] == "failed"
    assert data["stages"]["smoke"] == {
        "status": "skipped",
        "reason": "the build stage did not succeed",
    }


def test_make_branch_for_a_project_in_a_subdirectory(tmp_path, capsys):
    setup = make_setup(tmp_path, tag_v130=True)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("team repo\n")
    sub = repo / "deploy" / "forkpatch"
    sub.parent.mkdir(parents=True)
    shutil.copytree(setup.project, sub, ignore=shutil.ignore_patterns(".git", ".forkpatch"))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "team repo")
    out = tmp_path / "out2"
    args = ["-C", str(sub), "track", "--no-forecast", "--out", str(out)]
    assert main([*args, "--run", "--steps", "rebase"]) == 0
    capsys.readouterr()
    assert main([*args, "--make-branch", "--json"]) == 0
    change = json.loads(capsys.readouterr().out)
    assert change["kind"] == "pull" and change["updated"] is True
    names = git(repo, "diff", "--name-only", "main", change["branch"]).splitlines()
    assert sorted(names) == [
        "deploy/forkpatch/patches/cli-version.patch",
        "deploy/forkpatch/patches/odd-width-padding.patch",
        "deploy/forkpatch/series.yaml",
    ]
    assert main([*args, "--make-branch", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["commit"] == change["commit"] and again["updated"] is False


def test_pre_release_tags_are_ignored_by_run(tmp_path, capsys):
    setup = make_setup(tmp_path, tag_v130=False)
    tag_release(setup, "v1.3.0rc1")
    assert _run(setup, "--json") == 0
    assert json.loads(capsys.readouterr().out)["status"] == "up-to-date"
    assert not (setup.out / "v1.3.0rc1").exists()


@pytest.mark.parametrize("note", [MAX_BODY // 2, MAX_BODY + 10, 3 * MAX_BODY])
def test_the_change_body_is_within_the_forges_limit_and_keeps_its_state(tmp_path, capsys, note):
    """A body over what GitHub takes is cut at a line, says where the full summary is,
    and still ends with the state marker that the next run reads back."""
    setup = make_setup(tmp_path, tag_v130=True)
    assert _run(setup, "--steps", "rebase") == 0
    stage = setup.out / "v1.3.0" / "stages" / "rebase.json"
    done = stage_from_json("rebase", json.loads(stage.read_text()))
    assert isinstance(done, RebaseDone)
    long = replace(done, note=" ".join(["a long note"] * (note // 11)))
    stage.write_text(json.dumps(stage_to_json(long)))
    capsys.readouterr()
    args = ["-C", str(setup.project), "track", "--no-forecast", "--out", str(setup.out)]
    assert main([*args, "--make-branch", "--json"]) == 0
    body = Path(json.loads(capsys.readouterr().out)["body_file"]).read_text()
    assert len(body) <= MAX_BODY
    assert ("cut at" in body) is (note > MAX_BODY // 2)
    assert body.rstrip("\n").splitlines()[-1].startswith("<!-- forkpatch-state: ")
    prior = parse_state_marker(body)
    assert prior is not None and prior.status == "rebased"


def _rebased() -> RebaseDone:
    return RebaseDone(
        relation=None,
        note=None,
        summary={"clean": 1},
        patches={"p": "clean"},
        changed_files=(),
        report_json="rebase/r.json",
        report_markdown="rebase/r.md",
        series_sha256="0" * 64,
    )


def _smoked(passed: bool, missing: dict[str, str] | None = None) -> SmokeRun:
    return SmokeRun(
        passed, "static", "cpu", {"w.whl": "1"}, "smoke/report.json", {}, {}, {}, (), missing or {}
    )


def test_overall_status_and_finality():
    built = BuildDone("overlay", "r", "1.0", {"w.whl": "1"}, None, {})
    assert overall_status(Stages()) == "pending"
    conflict = RebaseConflict(None, ConflictEntry("p", (), ()), (), {"p": "conflict"})
    assert overall_status(Stages(rebase=conflict)) == "conflict"
    failed = Stages(rebase=_rebased(), build=built, smoke=_smoked(False))
    assert overall_status(failed) == "failed" and is_final(failed)
    pending = Stages(rebase=_rebased(), publish=Skipped("no target"))
    assert overall_status(pending) == "rebased" and not is_final(pending)
    # Smoke passed, nothing to publish to: final. Built, smoke not run: not final.
    assert is_final(
        Stages(rebase=_rebased(), build=built, smoke=_smoked(True), publish=Skipped("x"))
    )
    assert not is_final(Stages(rebase=_rebased(), build=built))
    # Nothing failed but a tier asked for did not run (an SM70 runner without its GPU):
    # not smoked, not failed, not final: the next scheduled run smokes it again.
    not_run = _smoked(True, {"sm70": "did not run (asked for by --tier sm70): no CUDA device"})
    assert not_run.status == "not-run"
    unsmoked = Stages(rebase=_rebased(), build=built, smoke=not_run, publish=Skipped("x"))
    assert overall_status(unsmoked) == "built" and not is_final(unsmoked)


def test_stage_results_round_trip_and_bad_files_are_not_trusted():
    for stage, result in (
        ("rebase", _rebased()),
        (
            "rebase",
            RebaseConflict(
                "forward",
                ConflictEntry("p", ("a",), (FileConflict("a", "x", (1, 2), 3),)),
                ("q",),
                {"p": "conflict"},
            ),
        ),
        ("smoke", _smoked(False)),
        ("smoke", _smoked(True, {"sm70": "did not run: no CUDA device"})),
        ("publish", Failed("boom", "tip", "http://index/")),
        ("build", Skipped("nothing")),
    ):
        raw = json.loads(json.dumps(stage_to_json(result)))
        assert stage_from_json(stage, raw) == result, stage
    assert stage_from_json("build", {"status": "done", "mode": "overlay"}) is None
    assert stage_from_json("build", {"status": "weird"}) is None
    assert stage_from_json("build", ["not", "a", "mapping"]) is None


@pytest.mark.parametrize(
    ("stage", "result", "field", "word"),
    [
        ("build", BuildDone("overlay", "r", "1.0", {"w.whl": "1"}, None, {}), "mode", "wheel"),
        ("build", BuildDone("container", "r", "1.0", {}, None, {}), "mode", "auto"),
        ("rebase", _rebased(), "relation", "sideways"),
        ("smoke", _smoked(True), "tier", "sm80"),
        ("smoke", _smoked(False), "tier", 70),
    ],
)
def test_a_stage_result_with_a_word_outside_its_set_is_not_trusted(stage, result, field, word):
    """A result file's build mode and smoke tier are words of closed sets (the typed
    fields say which): one outside its set is not a result of ours."""
    raw = json.loads(json.dumps(stage_to_json(result)))
    assert stage_from_json(stage, raw) == result
    assert stage_from_json(stage, {**raw, field: word}) is None


@pytest.mark.parametrize("status", ["published", "built", "pending"])
def test_a_state_marker_s_status_is_a_run_status_or_the_marker_is_not_ours(status):
    key = RunKey("v1.3.0", "a" * 40, "b" * 64)

    def marker(word: object) -> str:
        data = {"key": key.to_json(), "status": word, "final": True}
        return f"<!-- forkpatch-state: {json.dumps(data)} -->"

    prior = parse_state_marker(marker(status))
    assert prior is not None and prior.status == status
    for bad in ("Published", "up-to-date", None, 3, ["published"]):
        assert parse_state_marker(marker(bad)) is None, bad


def test_run_info_round_trips_its_release_tags_and_refuses_a_bad_one():
    """run.json's tags are read back as the typed tags they were (date, pre-release,
    why held back); a tag that is not one makes the file not a run's."""
    newer = (
        TagInfo("v1.3.0rc1", "1.3.0rc1", "c" * 40, 1_786_000_000.0, True, "pre-release"),
        TagInfo("v1.3.0", "1.3.0", "d" * 40),
    )
    info = RunInfo(
        key=RunKey("v1.3.0", "d" * 40, "b" * 64),
        tag_version="1.3.0",
        base_tag="v1.2.1",
        base_commit="a" * 40,
        fork_name="fork",
        fork_url="/srv/fork.git",
        project="/srv/project",
        branch="forkpatch/rebase-v1.3.0",
        newer=newer,
        forkpatch_version="0",
    )
    raw = json.loads(json.dumps(info.to_json()))
    assert raw["newer"][0]["date"] == "2026-08-06T07:06:40Z"
    assert RunInfo.from_json(raw) == info
    for bad in ({"tag": "v1.3.0"}, {**raw["newer"][1], "date": "yesterday"}, "v1.3.0"):
        assert RunInfo.from_json({**raw, "newer": [bad]}) is None, bad


def test_state_marker_parsing():
    key = RunKey("v1.3.0", "a" * 40, "b" * 64)
    body = f"# x\n<!-- forkpatch-state: {json.dumps({'key': key.to_json(), 'status': 'published', 'final': True})} -->\n"
    prior = parse_state_marker(body)
    assert prior is not None and prior.key == key and prior.final and prior.status == "published"
    assert parse_state_marker("no marker") is None
    assert parse_state_marker("<!-- forkpatch-state: {broken -->") is None
    assert parse_state_marker('<!-- forkpatch-state: {"key": 1} -->') is None


def test_a_run_names_the_edits_it_leaves_out_and_keeps_them(tmp_path, capsys):
    """`track --run` works on a copy of series.yaml and patches/: an edit in the editing
    work tree is not in it, and is left where it is; the run says so."""
    setup = make_setup(tmp_path, tag_v130=True)
    assert main(["-C", str(setup.project), "apply"]) == 0
    edited = setup.project / ".forkpatch" / "worktree" / "vllm" / "__init__.py"
    edited.write_text("# not refreshed\n")
    capsys.readouterr()
    assert _run(setup, "--steps", "rebase") == 0
    err = capsys.readouterr().err
    assert "uncommitted changes that are in no patch: vllm/__init__.py (modified)" in err, err
    assert edited.read_text() == "# not refreshed\n"
