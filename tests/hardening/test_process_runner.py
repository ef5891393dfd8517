"""forkpatch.proc, the one runner for programs other than git: each program in a session
of its own, ended as a group (deadline, Ctrl-C, children left behind); output read as it
comes into a bounded tail, never whole; the environment's secrets redacted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from forkpatch import proc
from forkpatch.proc import Deadline
from support.procs import alive
from support.reliability import Row

PY = sys.executable


def _gone(pid: int, within: float = 5.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


SELF_KILLS = [
    "kill 0",  # the shell's own group
    "kill -TERM 0; sleep 5",
    "kill -KILL -$$",  # the group by its id
]


@pytest.mark.parametrize("script", SELF_KILLS)
def test_a_program_that_signals_its_group_reaches_only_itself(script: str) -> None:
    done = proc.run(["sh", "-c", script], timeout=30)
    assert done.returncode < 0  # it killed itself
    assert "killed by SIG" in done.ended()
    # and this process (the test, forkpatch) is still here to say so
    assert os.getpgrp() != 0


TIMEOUTS = [
    "sleep 300 & echo $! > {pid}; sleep 300",  # still running at the timeout
    "(sleep 300; echo never) & echo $! > {pid}; exec sleep 300",
    "sh -c 'trap \"\" TERM; sleep 300' & echo $! > {pid}; sleep 300",  # ignores SIGTERM
]


@pytest.mark.parametrize("script", TIMEOUTS)
def test_at_the_timeout_the_whole_group_is_ended(tmp_path: Path, script: str) -> None:
    pidfile = tmp_path / "pid"
    t0 = time.monotonic()
    done = proc.run(["sh", "-c", script.format(pid=pidfile)], timeout=1.0, grace_s=0.5)
    assert done.timed_out and not done.ok
    assert time.monotonic() - t0 < 10
    assert _gone(int(pidfile.read_text())), "a background child outlived the timeout"


LEFT_BEHIND = [
    "sleep 300 & echo $! > {pid}; echo started",  # exits, its child holds the pipe
    "nohup sleep 300 > /dev/null 2>&1 & echo $! > {pid}",  # a detached child
]


@pytest.mark.parametrize("script", LEFT_BEHIND)
def test_children_left_behind_are_ended_when_the_program_exits(tmp_path: Path, script: str) -> None:
    pidfile = tmp_path / "pid"
    t0 = time.monotonic()
    done = proc.run(["sh", "-c", script.format(pid=pidfile)], timeout=60)
    assert done.returncode == 0 and not done.timed_out
    assert time.monotonic() - t0 < 10  # not held by the child's copy of the pipe
    assert _gone(int(pidfile.read_text()))


FLOODS = [
    # 40 MB in lines
    (
        "import sys\nfor i in range(400_000): sys.stdout.write('x' * 99 + '\\n')\nprint('END')",
        4096,
    ),
    # 40 MB in one line without an end, then a short last line on stderr
    ("import sys\nsys.stdout.write('y' * 40_000_000)\nsys.stderr.write('\\nEND\\n')", 65536),
]


@pytest.mark.parametrize(("code", "limit"), FLOODS)
def test_output_is_kept_as_a_bounded_tail(code: str, limit: int, tmp_path: Path) -> None:
    done = proc.run([PY, "-c", code], timeout=120, limit=limit)
    assert done.ok and done.truncated
    assert done.total_bytes >= 40_000_000
    assert len(done.output.encode()) <= limit
    assert done.output.rstrip().endswith("END")
    # the same on disk: two rotating files, each at most the limit
    log = tmp_path / "out.log"
    done = proc.run([PY, "-c", code], timeout=120, limit=limit, log_path=log)
    assert done.ok and done.output.rstrip().endswith("END")
    sizes = [p.stat().st_size for p in tmp_path.iterdir()]
    assert sizes and max(sizes) <= limit and len(sizes) <= 2


def test_streamed_lines_are_bounded_and_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_streamedsecret123")
    lines: list[str] = []
    code = "import os\nprint('a' * 300000)\nprint('tok', os.environ['GITHUB_TOKEN'])"
    done = proc.run([PY, "-c", code], timeout=60, on_line=lines.append)
    assert done.ok
    assert max(len(x) for x in lines) <= 70_000  # a line without end comes in pieces
    assert lines[-1] == "tok ****\n"
    assert "ghp_streamedsecret123" not in "".join(lines) + done.output


ENV_SECRETS = [
    ("TWINE_PASSWORD", "pypi-AgEIcHlwaS5vcmcCJGI"),
    ("GITHUB_TOKEN", "ghp_16C7e42F292c6912E7710c838347Ae178B4a"),
    ("CI_JOB_TOKEN", "glcbt-64_abcdefghij"),
    ("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCY"),
    ("MY_API_KEY", "0123456789abcdef"),
]


@pytest.mark.parametrize(("name", "value"), ENV_SECRETS)
def test_the_environments_secrets_are_redacted(
    name: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # in forkpatch's environment (inherited), or only in the one given to the program
    for given in (None, {**os.environ, name: value}):
        if given is None:
            monkeypatch.setenv(name, value)
        else:
            monkeypatch.delenv(name, raising=False)
        code = (
            "import os, sys, time\n"
            f"v = os.environ[{name!r}]\n"
            "sys.stdout.write('half ' + v[:5]); sys.stdout.flush(); time.sleep(0.3)\n"
            "sys.stdout.write(v[5:] + '\\n'); sys.stderr.write('err ' + v + '\\n')\n"
        )
        done = proc.run([PY, "-c", code], env=given, timeout=60)
        assert value not in done.output and "****" in done.output, done.output
        split = proc.run([PY, "-c", code], env=given, timeout=60, split_stderr=True)
        assert value not in split.output + split.errors


def test_a_short_value_is_not_redacted_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_TOKEN", "e")  # hiding every "e" would tell which letter it is
    assert proc.run([PY, "-c", "print('hello')"], timeout=30).output == "hello\n"


def test_the_names_that_hold_secrets() -> None:
    from forkpatch.redact import is_secret_name

    for name in ("TWINE_PASSWORD", "GITHUB_TOKEN", "PYPI_API_TOKEN", "HF_TOKEN", "GH_PAT"):
        assert is_secret_name(name), name
    for name in ("PATH", "SSH_AUTH_SOCK", "GIT_ASKPASS", "TOKENIZERS_PARALLELISM", "HOME"):
        assert not is_secret_name(name), name


def test_one_deadline_for_several_programs() -> None:
    deadline = Deadline(2.0)
    first = proc.run([PY, "-c", "import time; time.sleep(1.2)"], deadline=deadline, timeout=600)
    assert first.ok
    t0 = time.monotonic()
    second = proc.run([PY, "-c", "import time; time.sleep(30)"], deadline=deadline, timeout=600)
    assert second.timed_out and time.monotonic() - t0 < 5
    assert second.timeout_s is not None and second.timeout_s < 1.0  # what was left
    assert deadline.expired
    assert Deadline(None).remaining() is None and not Deadline(None).expired


def test_stdin_is_empty_and_a_missing_program_raises() -> None:
    assert proc.run(["cat"], timeout=30).ok  # does not wait for input
    assert proc.run(["cat"], stdin=b"given\n", timeout=30).output == "given\n"
    with pytest.raises(OSError):
        proc.run(["forkpatch-no-such-program"], timeout=30)


def test_ctrl_c_ends_the_programs_group(tmp_path: Path) -> None:
    """Ctrl-C reaches forkpatch only (the program has its own session): the runner ends
    the program's group before the interrupt goes on."""
    pidfile = tmp_path / "pid"
    ready = tmp_path / "ready"
    script = textwrap.dedent(
        f"""
        import sys
        from forkpatch import proc
        try:
            proc.run(["sh", "-c", "sleep 300 & echo $! > {pidfile}; touch {ready}; sleep 300"])
        except KeyboardInterrupt:
            sys.exit(130)
        """
    )
    runner = subprocess.Popen([PY, "-c", script])
    try:
        end = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < end:
            time.sleep(0.05)
        assert ready.exists()
        runner.send_signal(signal.SIGINT)
        assert runner.wait(timeout=30) == 130
    finally:
        runner.kill()
        runner.wait()
    assert _gone(int(pidfile.read_text()))


RELIABILITY = [
    Row(
        "external programs",
        "a program that signals its own process group (kill 0, kill -TERM 0, kill -KILL -$$)",
        f"{len(SELF_KILLS)} scripts",
        "only the program's own session is reached: forkpatch carries on and reports how it ended",
    ),
    Row(
        "external programs",
        "a program still running at its timeout, with background children (one ignoring "
        "SIGTERM); one that exits leaving children; Ctrl-C while one runs",
        f"{len(TIMEOUTS)} + {len(LEFT_BEHIND)} scripts + 1 interrupt",
        "the whole group is ended (SIGTERM, then SIGKILL); no child outlives it",
    ),
    Row(
        "external programs",
        "a program printing 40 MB in lines or in one line without an end, in memory and on "
        "disk; a streamed line of 300 kB",
        f"{len(FLOODS)} outputs x (memory, disk) + 1 stream",
        "a bounded tail is kept (the files on disk each at most the limit); never read whole",
    ),
    Row(
        "external programs",
        "several programs under one deadline; a program that waits for input",
        "2 cases",
        "the second is ended with what was left of the deadline; stdin is empty",
    ),
    Row(
        "secrets",
        "credential variables of the environment (TWINE_PASSWORD, GITHUB_TOKEN, CI_JOB_TOKEN, "
        "AWS_SECRET_ACCESS_KEY, *_API_KEY) printed by a program, split across reads",
        f"{len(ENV_SECRETS)} variables x (inherited, given) x (merged, split stderr)",
        "hidden in the output kept and in every line streamed; a 1-character value is not "
        "hidden inside other words",
    ),
]
