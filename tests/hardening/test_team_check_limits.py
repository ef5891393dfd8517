"""A team check is the team's code: it runs in a session of its own, killed as a group
(its timeout, the smoke run's one deadline, children it leaves), its output kept as a
bounded tail on disk, the environment's secrets out of every report, JUnit file and
terminal line, and its pytest node id inside the project or refused."""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

import pytest

from forkpatch.errors import SeriesError
from forkpatch.proc import Deadline
from forkpatch.sections import TeamCheck
from forkpatch.series import parse_series
from forkpatch.smoke.env import SmokeEnv
from forkpatch.smoke.team import run_team_checks
from support import smoke
from support.cli import Runner
from support.procs import alive
from support.reliability import Row

C = "a" * 40
HEAD = (
    f"version: 1\nfork:\n  name: f\n  url: /x\n  distribution: 1cat-vllm\nbase:\n  tag: v1\n"
    f"  commit: {C}\npatches:\n  - name: p\n    file: p.patch\n    summary: s\n"
)
SECRET = "pypi-AgEIcHlwaS5vcmcCJDU0secret"
TOKEN = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"


def _gone(pid: int) -> bool:
    end = time.monotonic() + 5
    while time.monotonic() < end and alive(pid):
        time.sleep(0.05)
    return not alive(pid)


def _senv(tmp_path: Path) -> SmokeEnv:
    """This interpreter as the smoke environment (the checks below need only python)."""
    venv = tmp_path / "env" / "venv"
    venv.mkdir(parents=True)
    return SmokeEnv(venv, Path(sys.executable), "system", sys.executable, True, None)


def _run(tmp_path: Path, checks: dict[str, TeamCheck], deadline: Deadline | None = None):
    root = tmp_path / "project"
    root.mkdir(exist_ok=True)
    return run_team_checks(
        checks,
        _senv(tmp_path),
        {},
        device={},
        root=root,
        fork_tests=lambda: root,
        deadline=deadline,
    )


OUTSIDE_IDS = [
    "../outside/test_x.py::t",
    "tests/../../outside/test_x.py",
    "/etc/passwd",
    "~/test_home.py::t",
    "--rootdir=/",
    "-p evil",
    "tests\\..\\..\\x.py",
]


@pytest.mark.parametrize("nodeid", OUTSIDE_IDS)
def test_a_node_id_outside_the_project_is_refused_on_load(nodeid: str) -> None:
    text = HEAD + f"smoke:\n  checks:\n    static.ours:\n      pytest: {json.dumps(nodeid)}\n"
    with pytest.raises(SeriesError) as exc:
        parse_series(text)
    assert "series.yaml:" in str(exc.value) and "node id" in str(exc.value)
    assert "inside the project" in (exc.value.tip or "")


def test_node_ids_inside_the_project_load() -> None:
    for nodeid in ("tests/test_x.py::t", "test_x.py", "a/b..c/test.py::k[x-1]"):
        text = HEAD + f"smoke:\n  checks:\n    static.ours:\n      pytest: {json.dumps(nodeid)}\n"
        assert parse_series(text).smoke.team_checks()["static.ours"].pytest == nodeid


def test_a_node_id_through_a_link_out_of_the_project_is_not_run(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    ran = outside / "ran"
    (outside / "test_x.py").write_text(
        f"def test_t():\n    open({str(ran)!r}, 'w').close()\n", encoding="utf-8"
    )
    root = tmp_path / "project"
    (root / "team").mkdir(parents=True)
    (root / "team" / "linked").symlink_to(outside, target_is_directory=True)
    (root / "team" / "test_link.py").symlink_to(outside / "test_x.py")
    got = _run(
        tmp_path,
        {
            "static.dir": TeamCheck(pytest="team/linked/test_x.py::test_t"),
            "static.file": TeamCheck(pytest="team/test_link.py::test_t"),
        },
    )
    for result in got.values():
        assert result.outcome == "error" and "outside" in result.detail, result
    assert not ran.exists()


GROUP_KILLS = [
    ["sh", "-c", "kill 0"],
    ["sh", "-c", "trap '' TERM; kill -KILL 0"],
    ["sh", "-c", "kill -TERM -$$; sleep 5"],
]


@pytest.mark.parametrize("command", GROUP_KILLS)
def test_a_check_that_kills_its_group_fails_alone(tmp_path: Path, command: list[str]) -> None:
    got = _run(tmp_path, {"static.killer": TeamCheck(command=tuple(command))})
    result = got["static.killer"]
    assert result.outcome == "failed" and "killed by SIG" in result.detail


TIMED_OUT = [
    "sleep 300 & echo $! > {pid}; sleep 300",
    "sh -c 'trap \"\" TERM; sleep 300' & echo $! > {pid}; exec sleep 300",
]


@pytest.mark.parametrize("script", TIMED_OUT)
def test_at_its_timeout_a_checks_children_end_with_it(tmp_path: Path, script: str) -> None:
    pidfile = tmp_path / "pid"
    t0 = time.monotonic()
    check = TeamCheck(command=("sh", "-c", script.format(pid=pidfile)), timeout=1)
    result = _run(tmp_path, {"static.sleepy": check})["static.sleepy"]
    assert result.outcome == "failed" and "timed out after 1 s (its timeout)" in result.detail
    assert time.monotonic() - t0 < 15
    assert _gone(int(pidfile.read_text()))


def test_children_a_passing_check_leaves_are_ended(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    check = TeamCheck(command=("sh", "-c", f"sleep 300 & echo $! > {pidfile}; echo ok"))
    result = _run(tmp_path, {"static.leaves": check})["static.leaves"]
    assert result.outcome == "passed" and result.duration_s < 10
    assert _gone(int(pidfile.read_text()))


def test_one_deadline_for_every_check(tmp_path: Path) -> None:
    """Each check's own 600 s do not add up past the smoke run's --timeout."""
    sleep = ("python", "-c", "import time; time.sleep(2)")
    checks = {f"static.c{i}": TeamCheck(command=sleep) for i in range(5)}
    t0 = time.monotonic()
    got = _run(tmp_path, checks, deadline=Deadline(3.0))
    assert time.monotonic() - t0 < 10
    outcomes = [r.outcome for r in got.values()]
    assert outcomes[0] == "passed"
    assert "failed" in outcomes  # cut by the deadline, and says so
    cut = next(r for r in got.values() if r.outcome == "failed")
    assert "the smoke run's --timeout (3 s)" in cut.detail
    assert outcomes[-1] == "not-run" and "--timeout 3 s" in got["static.c4"].detail


GIGABYTES = [
    # 1 GiB in lines
    (
        "import sys\nb = ('x' * 1023 + '\\n') * 1024\nfor _ in range(1024): sys.stdout.write(b)\n"
        "print('LAST LINE'); sys.exit(3)"
    ),
    # 512 MiB in one line
    (
        "import sys\nb = 'y' * (1 << 20)\nfor _ in range(512): sys.stdout.write(b)\n"
        "sys.stdout.write('\\nLAST LINE\\n'); sys.exit(3)"
    ),
]


@pytest.mark.parametrize("code", GIGABYTES)
def test_a_check_that_prints_gigabytes_is_kept_as_a_tail(tmp_path: Path, code: str) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = _run(tmp_path, {"static.loud": TeamCheck(command=("python", "-c", code))})[
        "static.loud"
    ]
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert result.outcome == "failed" and "exit status 3" in result.detail
    assert "LAST LINE" in result.detail and len(result.detail) < 100_000
    assert after - before < 200 * 1024  # KiB: the output was never held whole
    logs = list((tmp_path / "env" / "team-logs").iterdir())
    assert logs and max(p.stat().st_size for p in logs) <= 256 * 1024


@pytest.mark.slow
def test_secrets_a_failing_check_echoes_reach_no_report(
    example_build, tmp_path, capsys, monkeypatch
):
    """TWINE_PASSWORD and GITHUB_TOKEN, echoed by a failing check and a passing one, are
    in neither the stored report (what publish copies), the --report copy, the JUnit
    file, stdout (--json) nor stderr."""
    monkeypatch.setenv("TWINE_PASSWORD", SECRET)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    project = smoke.copy_project(example_build, tmp_path / "project")
    echo = "import os, sys; print(os.environ['TWINE_PASSWORD'], os.environ['GITHUB_TOKEN'])"
    smoke.set_smoke(
        project,
        {"cli-version": ["static.leaks", "static.leaks-and-passes"]},
        sections={
            "smoke": {
                "checks": {
                    "static.leaks": {"command": ["python", "-c", echo + "; sys.exit(1)"]},
                    "static.leaks-and-passes": {"command": ["python", "-c", echo]},
                }
            }
        },
    )
    junit, copy = tmp_path / "junit.xml", tmp_path / "copy.json"
    run = Runner(project, capsys)
    args = ["smoke", str(example_build.wheel), "--tier", "static", "--deps", "none"]
    _code, out, err = run(*args, "--junit", str(junit), "--report", str(copy), expect=None)
    _code, text, err2 = run(*args, expect=None)  # the terminal report, not --json
    stored = list((project / ".forkpatch" / "smoke").glob("*.json"))
    assert stored
    for where, body in [
        ("stdout", out),
        ("stderr", err + err2 + text),
        ("junit", junit.read_text()),
        ("--report", copy.read_text()),
        *((str(p), p.read_text()) for p in stored),
    ]:
        assert SECRET not in body and TOKEN not in body, where
    data = json.loads(copy.read_text())
    got = {c["id"]: c for c in data["checks"]}
    assert (
        got["static.leaks"]["outcome"] == "failed" and "**** ****" in got["static.leaks"]["detail"]
    )
    # the terminal report shows the failure's output under its first line
    assert "last output:" in err2 and "**** ****" in err2.split("static.leaks ", 1)[1]


RELIABILITY = [
    Row(
        "external programs",
        "a team smoke check that kills its process group (kill 0, with SIGTERM trapped, "
        "by the group's id)",
        f"{len(GROUP_KILLS)} commands",
        "that check fails with the signal named; the smoke run goes on and writes its report",
    ),
    Row(
        "external programs",
        "a team check past its timeout with background children (one ignoring SIGTERM); "
        "a passing check that leaves a child; five checks of 2 s under a 3 s --timeout",
        f"{len(TIMED_OUT)} + 1 + 1 cases",
        "the group is ended and no child outlives it; one deadline for the whole smoke run: "
        "a check cut by it or not started says so",
    ),
    Row(
        "external programs",
        "a team check printing 1 GiB in lines or 512 MiB in one line",
        f"{len(GIGABYTES)} outputs",
        "failed with the last lines of its output; a bounded tail on disk; forkpatch's "
        "memory stays flat",
    ),
    Row(
        "path safety",
        "a team check's pytest node id outside the project (.., absolute, ~, backslashes, "
        "an option) on load; one through a symlinked file or directory at run time",
        f"{len(OUTSIDE_IDS)} node ids + 2 links",
        "refused on load naming series.yaml:LINE; a linked one is an error and never run",
        refused=str(len(OUTSIDE_IDS) + 2),
    ),
    Row(
        "secrets",
        "TWINE_PASSWORD and GITHUB_TOKEN echoed by a failing and a passing team check",
        "1 smoke run x (stored report, --report, JUnit, --json, the terminal report)",
        "in no report, JUnit file or output line",
    ),
]
