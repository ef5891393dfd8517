"""The team's own smoke checks (series.yaml smoke.checks): declared, validated, run in the
smoke environment with the wheel installed, reported per check, counted by the gate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forkpatch.errors import SeriesError
from forkpatch.series import dump_series, parse_series
from forkpatch.smoke import checks
from support import smoke
from support.cli import Runner

C = "a" * 40
HEAD = (
    f"version: 1\nfork:\n  name: f\n  url: /x\n  distribution: 1cat-vllm\nbase:\n  tag: v1\n"
    f"  commit: {C}\npatches:\n  - name: p\n    file: p.patch\n    summary: s\n"
    "    smoke: [static.ours]\n"
)

TEAM_TEST = """\
import importlib.metadata as md
import os
import sys

import vllm


def test_the_wheel_is_installed():
    assert os.path.realpath(sys.prefix) != os.path.realpath(sys.base_prefix)
    assert "site-packages" in vllm.__file__, vllm.__file__
    assert md.version("vllm") == md.version("1cat-vllm")


def test_fails_on_purpose():
    assert md.version("1cat-vllm") == "0.0.0", "not the version this test wants"
"""


def test_declared_checks_round_trip_and_are_known_to_the_registry():
    text = HEAD + (
        "smoke:\n  checks:\n    static.ours:\n      pytest: team/test_x.py::test_y\n"
        "      summary: our import\n    sm70.fork-sm70:\n"
        "      pytest: tests/quantization/test_sm70_fp8_prefill_exact_dense.py\n      in: fork\n"
        "    gpu.script:\n      command: [python, scripts/gpu.py, --fast]\n      timeout: 30\n"
    )
    series = parse_series(text)
    assert dump_series(series) == text
    reg = checks.registry(series)
    assert reg["static.ours"].tier == "static" and "our import" in reg["static.ours"].summary
    assert reg["sm70.fork-sm70"].tier == "sm70" and "(in the fork)" in reg["sm70.fork-sm70"].summary
    checks.validate_series(series)
    assert "static.ours" in checks.plan(series.patches, series)


@pytest.mark.parametrize(
    ("checks_yaml", "words"),
    [
        ("    ours:\n      command: [echo]\n", "must be '<tier>.<name>'"),
        ("    cuda.ours:\n      command: [echo]\n", "must be '<tier>.<name>'"),
        ("    static.ours:\n      summary: nothing to run\n", "exactly one of 'pytest'"),
        (
            "    static.ours:\n      pytest: a.py\n      command: [echo]\n",
            "exactly one of 'pytest'",
        ),
        ("    static.ours:\n      command: python -c pass\n", "must be a list"),
        ("    static.ours:\n      command: [echo]\n      in: fork\n", "a command has none"),
        (
            "    static.ours:\n      pytest: a.py\n      in: elsewhere\n",
            "must be one of project, fork",
        ),
        ("    static.ours:\n      pytest: a.py\n      timout: 3\n", "did you mean 'timeout'"),
    ],
)
def test_bad_declarations_name_the_line(checks_yaml, words):
    with pytest.raises(SeriesError) as exc:
        parse_series(HEAD + "smoke:\n  checks:\n" + checks_yaml)
    text = f"{exc.value}\n{exc.value.tip}"
    assert words in text and "series.yaml:" in text, text


def test_a_team_check_cannot_take_a_built_in_id():
    series = parse_series(
        HEAD.replace("static.ours", "static.cli-version")
        + "smoke:\n  checks:\n    static.cli-version:\n      command: [echo]\n"
    )
    with pytest.raises(SeriesError, match="built-in check's id"):
        checks.validate_series(series)


def test_an_undeclared_team_check_is_unknown():
    with pytest.raises(SeriesError, match=r"unknown smoke check 'static\.ours'"):
        checks.validate_series(parse_series(HEAD))


@pytest.mark.slow
def test_team_checks_run_in_the_smoke_environment(example_build, tmp_path, capsys):
    project = smoke.copy_project(example_build, tmp_path / "project")
    (project / "team").mkdir()
    (project / "team" / "test_ours.py").write_text(TEAM_TEST)
    smoke.set_smoke(
        project,
        {"cli-version": ["static.team-pytest", "static.team-fails", "static.team-command"]},
        sections={
            "smoke": {
                "checks": {
                    "static.team-pytest": {
                        "pytest": "team/test_ours.py::test_the_wheel_is_installed"
                    },
                    "static.team-fails": {"pytest": "team/test_ours.py::test_fails_on_purpose"},
                    "static.team-command": {
                        "command": [
                            "python",
                            "-c",
                            "import vllm, sys; sys.exit(0 if 'site-packages' in vllm.__file__ else 7)",
                        ]
                    },
                    "static.team-missing": {"pytest": "team/test_ours.py::test_not_there"},
                    "sm70.team-v100": {"command": ["python", "-c", "pass"]},
                    "static.team-needs": {"command": ["python", "-c", "import tblib_nowhere"]},
                }
            }
        },
    )
    smoke.set_smoke(
        project,
        {"capability-floor": ["sm70.team-v100", "static.team-missing", "static.team-needs"]},
    )
    run = Runner(project, capsys)
    _code, out, err = run("smoke", str(example_build.wheel), "--json", expect=1)
    data = json.loads(out)
    got = {c["id"]: c for c in data["checks"]}
    assert got["static.team-pytest"]["outcome"] == "passed"
    assert got["static.team-command"]["outcome"] == "passed"
    fails = got["static.team-fails"]
    assert fails["outcome"] == "failed" and "not the version this test wants" in fails["detail"]
    assert fails["patches"] == ["cli-version"]
    assert got["static.team-missing"]["outcome"] == "failed"
    needs = got["static.team-needs"]
    assert needs["outcome"] == "not-run" and "needs the module 'tblib_nowhere'" in needs["detail"]
    v100 = got["sm70.team-v100"]
    # Not run: no V100 here (with torch, "no CUDA device"; without, torch is missing).
    assert v100["outcome"] == "not-run"
    assert "CUDA" in v100["detail"] or "needs the module 'torch'" in v100["detail"]
    # they count like built-ins: the static tier failed, so the wheel did not pass
    assert data["passed"] is False and data["tiers"]["status"]["static"] == "failed"
    assert "--bisect" in err  # a team check a patch can break offers the bisect


@pytest.mark.parametrize(
    ("failed", "patches", "says"),
    [
        ("static.ours", ["p"], "`forkpatch smoke --bisect` finds the patch that broke static.ours"),
        ("static.ours", [], "the report above says why"),  # no patch to blame
        ("static.provenance", ["p"], "rebuild it (`forkpatch build-wheel`)"),
    ],
)
def test_failure_tip_offers_bisect_for_a_team_check(failed, patches, says):
    from forkpatch.smoke.report import CheckResult, SmokeReport, WheelEntry
    from forkpatch.smoke.runner import failure_tip

    report = SmokeReport(
        wheels=[WheelEntry("a" * 64)],
        primary_sha256="a" * 64,
        version="1",
        requested_tiers=["static"],
        checks=[
            CheckResult(failed, "static", "failed"),
            CheckResult("static.x", "static", "passed"),
        ],
        environment={},
        device={},
        patches=patches,
    )
    assert says in failure_tip(report)
    assert ("--bisect" in failure_tip(report)) is (failed == "static.ours" and bool(patches))


def test_sections_keep_team_checks_through_with_patches(tmp_path: Path):
    series = parse_series(HEAD + "smoke:\n  checks:\n    static.ours:\n      command: [echo]\n")
    again = series.with_patches(series.patches)
    assert again.smoke.team_checks() == series.smoke.team_checks()


@pytest.mark.real_fork
@pytest.mark.slow
def test_a_fork_test_named_by_node_id(tmp_path, capsys):
    """The fork's own SM70 test, named with ``in: fork``, runs from the fork's tests/ at the
    series' base against the installed wheel (the fixture's v1.2.1 wheel, overlaid)."""
    import shutil

    from forkpatch.cli import main
    from support import REPO_ROOT, realfork

    fork = realfork.fork_or_skip()
    wheel = realfork.fixture_wheel_or_skip()
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy2(REPO_ROOT / "series.yaml", project / "series.yaml")
    shutil.copytree(REPO_ROOT / "patches", project / "patches")
    node = "tests/quantization/test_sm70_turbomind_adapter.py::test_gptq_unpack_weight_and_zeros"
    smoke.set_smoke(
        project,
        {"capability-floor": ["static.fork-sm70-adapter"]},
        sections={
            "smoke": {"checks": {"static.fork-sm70-adapter": {"pytest": node, "in": "fork"}}}
        },
    )
    args = ["-C", str(project), "--fork-repo", fork]
    dist = tmp_path / "dist"
    build = [*args, "build-wheel", "--mode", "overlay", "--base-wheel", str(wheel)]
    assert main([*build, "--out", str(dist)]) == 0
    capsys.readouterr()
    built = next(dist.glob("*.whl"))
    main([*args, "smoke", str(built), "--tier", "static", "--json"])
    data = json.loads(capsys.readouterr().out)
    got = {c["id"]: c for c in data["checks"]}["static.fork-sm70-adapter"]
    # It ran from the fork's tests: passed, failed by the test itself, or not run for a
    # module the fork's conftest needs and this environment lacks (named).
    assert got["outcome"] in ("passed", "failed", "not-run"), got
    if got["outcome"] == "not-run":
        assert "needs the module" in got["detail"], got
    else:
        assert "test_sm70_turbomind_adapter" in got["detail"] or "passed" in got["detail"], got


def test_list_checks_names_the_teams_own(tmp_path, capsys):
    from support.projects import example_project

    _fork, proj = example_project(tmp_path)
    smoke.set_smoke(
        proj.root,
        {},
        sections={"smoke": {"checks": {"gpu.ours": {"command": ["echo"], "summary": "ours"}}}},
    )
    _code, out, _err = Runner(proj.root, capsys)("smoke", "--list-checks")
    line = next(ln for ln in out.splitlines() if ln.startswith("gpu.ours"))
    assert "the team's check: ours; command echo" in line
    assert "static.kernel-archs" in out  # the host checks are listed too


@pytest.mark.slow
def test_bisect_finds_the_patch_that_breaks_a_team_check(example_build, tmp_path, capsys):
    """The team's check runs from the project's own files in every probe (the scratch
    builds have none of them): the culprit is the patch, not the bisect's copy."""
    project = smoke.broken_project(example_build, tmp_path / "project")
    (project / "team").mkdir()
    (project / "team" / "check_cli.py").write_text("import vllm.entrypoints.cli\n")
    smoke.set_smoke(
        project,
        {"cli-version": ["static.team-cli"]},
        sections={
            "smoke": {"checks": {"static.team-cli": {"command": ["python", "team/check_cli.py"]}}}
        },
    )
    args = ["smoke", "--bisect", "series.yaml", "--base-wheel", str(example_build.base_wheel)]
    _code, out, _err = Runner(project, capsys)(*args, "--tier", "static", "--json", expect=None)
    data = json.loads(out)
    assert data["status"] == "found", data
    culprit = next(c for c in data["first_bad"] if "static.team-cli" in c["checks"])
    assert culprit["patch"] == "break-cli"
    assert "broken on purpose" in culprit["details"]["static.team-cli"]
