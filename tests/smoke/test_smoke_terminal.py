"""The terminal smoke report says what the JSON says: a check's detail past its first
line (a failure's last output, each kernel module's architectures), pytest's result
line for a passing team pytest check, and progress counts that match what each step
announced."""

from __future__ import annotations

import re

import pytest

from forkpatch.smoke.report import CheckResult, SmokeReport, WheelEntry
from forkpatch.smoke.runner import DETAIL_LINES_NOT_PASSED, print_summary
from support import smoke
from support.cli import Runner

KERNELS = (
    "1 of 2 CUDA module(s) carry no sm_70 SASS (vllm/_C.abi3.so): their kernels cannot run\n"
    "vllm/_C.abi3.so: SASS sm_80, sm_90; PTX compute_90\n"
    "vllm/_moe_C.abi3.so: SASS sm_70, sm_80\n"
    "cannot read vllm/_flash.abi3.so: truncated ELF header"
)


def _report(*checks: CheckResult) -> SmokeReport:
    return SmokeReport(
        wheels=[WheelEntry("a" * 64)],
        primary_sha256="a" * 64,
        version="1.2.1",
        requested_tiers=["static"],
        checks=list(checks),
        environment={"deps": "none"},
        device={},
        patches=[],
    )


@pytest.mark.parametrize(
    ("check", "shown", "hidden"),
    [
        (
            CheckResult(
                "static.team-cmd",
                "static",
                "failed",
                0.1,
                "exit status 2; last "
                "output:\nTraceback (most recent call last):\nValueError: bad width",
            ),
            ["last output:", "Traceback (most recent call last):", "ValueError: bad width"],
            [],
        ),
        (
            CheckResult("static.kernel-archs", "static", "failed", 0.1, KERNELS),
            ["SASS sm_80, sm_90; PTX compute_90", "cannot read vllm/_flash.abi3.so: truncated"],
            [],
        ),
        (
            CheckResult(
                "static.kernel-archs",
                "static",
                "passed",
                0.1,
                "2 CUDA module(s), all with sm_70 SASS\nvllm/_C.abi3.so: SASS sm_70",
            ),
            ["vllm/_C.abi3.so: SASS sm_70"],
            [],
        ),
        (
            CheckResult(
                "static.long",
                "static",
                "failed",
                0.1,
                "exit status 1; last output:\n" + "\n".join(f"line {i}" for i in range(60)),
            ),
            ["line 59", "more line(s) in the report"],
            ["line 0\n"],  # a failure's end says why: its last lines are shown
        ),
    ],
)
def test_the_terminal_shows_the_detail_past_its_first_line(check, shown, hidden, capsys):
    print_summary(_report(check))
    err = capsys.readouterr().err
    for text in shown:
        assert text in err, err
    for text in hidden:
        assert text not in err, err
    assert len(err.splitlines()) < DETAIL_LINES_NOT_PASSED + 15


TEAM_TESTS = """\
import warnings


def test_passes_with_a_warning():
    warnings.warn("a deprecation the team knows of", DeprecationWarning)


def test_passes():
    pass
"""


@pytest.mark.slow
def test_a_smoke_run_reads_right_on_the_terminal(example_build, tmp_path, capsys):
    project = smoke.copy_project(example_build, tmp_path / "project")
    (project / "team").mkdir()
    (project / "team" / "test_team.py").write_text(TEAM_TESTS)
    smoke.set_smoke(
        project,
        {"cli-version": ["static.team-warns", "static.team-fails"]},
        sections={
            "smoke": {
                "checks": {
                    "static.team-warns": {"pytest": "team/test_team.py"},
                    "static.team-fails": {
                        "command": ["python", "-c", "print('the reason it failed'); exit(4)"]
                    },
                }
            }
        },
    )
    _code, _out, err = Runner(project, capsys)(
        "smoke", str(example_build.wheel), "--tier", "static", expect=None
    )
    # each step's count is the count its progress lines go to
    for announced in re.finditer(r"==> run (\d+) (team )?check\(s\)", err):
        total = announced.group(1)
        section = err[announced.end() :].split("==>", 1)[0]
        counts = re.findall(r"\[(\d+)/(\d+)\]", section)
        assert counts and {t for _n, t in counts} == {total}, (total, counts)
        assert counts[-1][0] == total
    row = next(
        ln
        for ln in err.splitlines()
        if "static.team-warns" in ln and "passed" in ln and "s  " in ln
    )
    assert re.search(r"2 passed, 1 warning in [\d.]+s", row), row
    assert "-- Docs" not in row
    after = err.split("static.team-fails", 2)[-1]
    assert "last output:" in after and "the reason it failed" in after
