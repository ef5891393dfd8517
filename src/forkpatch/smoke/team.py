"""The team's own smoke checks (series.yaml ``smoke.checks``), run in the smoke environment.

A check is a pytest node id or a command, under an id ``<tier>.<name>`` (the tier it
needs); patches name it under ``smoke:`` like a built-in check. It runs after the
built-in checks, with the environment's interpreter first on PATH (``python`` and
``pytest`` are the environment's, with the wheel installed), from the project's
directory; a pytest node id ``in: fork`` is found in the fork's own tests at the series'
base (its ``tests/`` exported beside the environment, never its ``vllm/`` sources, so
``vllm`` is the wheel's). Exit status 0 is ``passed``; anything else ``failed``, with
the output's last lines. A tier the device does not have, a pytest the environment
lacks, or nothing to run from is ``not-run`` with the reason.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import tarfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forkpatch import log, proc
from forkpatch.intree import extract_tar
from forkpatch.proc import Deadline, tail
from forkpatch.sections import TeamCheck
from forkpatch.smoke import incheck
from forkpatch.smoke.env import SmokeEnv, clean_env
from forkpatch.smoke.report import CheckResult
from forkpatch.smoke.session import PREIMPORT, SERVER_GONE, TeamServer, team_server

if TYPE_CHECKING:
    from forkpatch.project import Project

DEFAULT_TIMEOUT_S = 600
_MISSING = re.compile(r"ModuleNotFoundError: No module named ['\"]([\w.]+)['\"]")
FORK_TESTS = "tests"


def fork_tests(project: Project | None, workdir: Path) -> Path:
    """The fork's ``tests/`` at the series' base, exported under ``workdir`` (once)."""
    dest = workdir / "fork-tests"
    if dest.is_dir():
        return dest
    if project is None:
        raise FileNotFoundError("no project: the fork's tests are unknown")
    base = project.series.base
    store = project.fork().store
    data = store.run("archive", "--format=tar", base.commit, FORK_TESTS).stdout
    dest.mkdir()
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        extract_tar(tf, dest)
    return dest


def _gate(tier: str, device: Mapping[str, Any]) -> str | None:
    needs = {"gpu": ("cuda",), "gpu-jit": ("cuda",), "sm70": ("cuda", "sm70")}.get(tier, ())
    return incheck.gate(incheck.CheckDef("team", tier, lambda _ctx: None, needs), dict(device))


def _has_pytest(python: Path, env: Mapping[str, str]) -> bool:
    try:
        return proc.run([str(python), "-c", "import pytest"], env=env, timeout=120).ok
    except OSError:
        return False


#: The bytes of a check's output kept (on disk, beside the environment): its tail.
OUTPUT_LIMIT = 256 * 1024


def node_path_inside(nodeid: str, root: Path) -> str | None:
    """Why the file of the pytest node id ``nodeid`` is not inside ``root`` (None: it
    is): symbolic links resolved, so no link leads out of the project either."""
    rel = nodeid.split("::", 1)[0]
    base = root.resolve()
    target = (base / rel).resolve()
    if target != base and not target.is_relative_to(base):
        return f"the node id {nodeid!r} names {target}, outside {base}"
    return None


def _server_gone(done: proc.Finished) -> bool:
    """The client said the server could not run the check (teamclient.py)."""
    return (
        not done.timed_out
        and done.returncode == SERVER_GONE
        and "forkpatch: the team check server" in done.output
    )


def _summary_line(text: str) -> str:
    """pytest's result line ("3 passed in 0.41s") from its output, else the last line."""
    lines = [ln.strip(" =") for ln in text.splitlines() if ln.strip(" =")]
    for line in reversed(lines):
        if re.search(r"\b\d+ (passed|failed|error|errors|skipped|xfailed|xpassed)\b", line):
            return line
    return lines[-1] if lines else ""


def run_team_checks(
    checks: Mapping[str, TeamCheck],
    senv: SmokeEnv,
    plan: Mapping[str, Sequence[str]],
    *,
    device: Mapping[str, Any],
    root: Path | None,
    fork_tests: Callable[[], Path],
    deadline: Deadline | None = None,
    preimport: Sequence[str] = PREIMPORT,
    server: TeamServer | None = None,
) -> dict[str, CheckResult]:
    """Run the team's ``checks`` in ``senv``; one result per check.

    Each runs in a session of its own (ended as a group at its timeout, at the smoke
    run's ``deadline`` or on Ctrl-C), its output kept as a bounded tail on disk. The
    pytest checks fork from one server that has imported ``preimport`` (vllm) once
    (:mod:`forkpatch.smoke.session`; ``server``: one the caller started, else one of
    its own)."""
    env = check_env(senv)
    out: dict[str, CheckResult] = {}
    deadline = deadline or Deadline(None)
    has_pytest: list[bool] = []  # asked once, at the first pytest check
    with contextlib.ExitStack() as stack:
        if server is None:
            server = stack.enter_context(
                team_server(senv.python, senv.work_dir, env, deadline, preimport)
            )
        for n, (cid, tc) in enumerate(checks.items(), 1):
            tier = cid.partition(".")[0]
            t0 = time.monotonic()
            outcome, detail = _run_one(
                cid, tc, tier, senv, env, device, root, fork_tests, deadline, server, has_pytest
            )
            out[cid] = CheckResult.of(
                cid, tier, outcome, time.monotonic() - t0, detail, list(plan.get(cid, []))
            )
            log.info(f"    [{n}/{len(checks)}] {outcome:<8} {cid} ({time.monotonic() - t0:.1f}s)")
    return out


def check_env(senv: SmokeEnv) -> dict[str, str]:
    """The environment a team check runs in: the smoke venv's interpreter first on PATH."""
    env = clean_env()
    env["PATH"] = os.pathsep.join([str(senv.bin_dir), env.get("PATH", "")])
    env["VIRTUAL_ENV"] = str(senv.path)
    return env


def _run_one(
    cid: str,
    tc: TeamCheck,
    tier: str,
    senv: SmokeEnv,
    env: Mapping[str, str],
    device: Mapping[str, Any],
    root: Path | None,
    fork_tests: Callable[[], Path],
    deadline: Deadline,
    server: TeamServer | None = None,
    has_pytest: list[bool] | None = None,
) -> tuple[str, str]:
    if deadline.expired:
        return incheck.NOT_RUN, (
            f"the smoke run's time (--timeout {deadline.seconds:.0f} s) was spent before it "
            "could start"
        )
    why = _gate(tier, device)
    if why is not None:
        return incheck.NOT_RUN, why
    if tc.pytest is not None:
        if has_pytest is None:
            has_pytest = []
        if not has_pytest:
            has_pytest.append(_has_pytest(senv.python, env))
        if not has_pytest[0]:
            return incheck.NOT_RUN, (
                "pytest is not installed in the smoke environment (install it beside the "
                "wheel, or use --deps system with a python that has it)"
            )
        if tc.source == "fork":
            try:
                cwd = fork_tests()
            except (FileNotFoundError, OSError) as exc:
                return incheck.NOT_RUN, f"the fork's tests are not available: {exc}"
            except Exception as exc:  # a git failure reading the store
                return incheck.ERROR, f"cannot export the fork's tests: {exc}"
        elif root is None:
            return incheck.NOT_RUN, "no project directory: the node id cannot be found"
        else:
            cwd = root
        outside = node_path_inside(tc.pytest, cwd)
        if outside is not None:
            return incheck.ERROR, f"{outside}: a team check runs only the project's tests"
        args = ["-q", "-p", "no:cacheprovider", tc.pytest]
        alone = [str(senv.python), "-m", "pytest", *args]
        # Through the environment's check server (vllm imported once), else on its own.
        via = server.argv(args) if server is not None else None
    else:
        alone = list(tc.command or ())
        via = None
        if root is None:
            return incheck.NOT_RUN, "no project directory to run the command in"
        cwd = root
    log.info(f"+ {' '.join(alone)}  (in {cwd}{', through the check server' if via else ''})")
    timeout = tc.timeout or DEFAULT_TIMEOUT_S
    logs = senv.work_dir / "team-logs"
    logs.mkdir(exist_ok=True)

    def run(cmd: list[str]) -> proc.Finished:
        return proc.run(
            cmd,
            cwd=cwd,
            env=env,
            timeout=timeout,
            deadline=deadline,
            limit=OUTPUT_LIMIT,
            log_path=logs / f"{cid}.log",
        )

    cmd = via or alone
    try:
        done = run(cmd)
        if via is not None and server is not None and _server_gone(done):
            # The server, not the check, went: this check runs on its own; the next
            # one gets a fresh server.
            log.warn(f"the team check server went before {cid} ran: it runs on its own")
            server.gone()
            cmd = alone
            done = run(cmd)
    except OSError as exc:
        return incheck.ERROR, f"cannot run {cmd[0]}: {exc}"
    text = done.output
    if done.timed_out:
        whose = (
            f"the smoke run's --timeout ({deadline.seconds:.0f} s)"
            if done.timeout_s is not None and done.timeout_s < timeout - 0.5
            else "its timeout"
        )
        return incheck.FAILED, (
            f"timed out after {done.timeout_s:.0f} s ({whose}); its process group was ended; "
            f"last output:\n{tail(text, 15)}"
        )
    if done.returncode < 0:
        return incheck.FAILED, f"{done.ended()}; last output:\n{tail(text, 15)}"
    proc_rc = done.returncode
    missing = _MISSING.search(text) if proc_rc != 0 else None
    if missing is not None and missing.group(1).split(".")[0] not in ("vllm", "forkpatch"):
        # A module the environment lacks (a test requirement of the fork's, say) is
        # not the wheel's fault: the check could not run here.
        top = missing.group(1).split(".")[0]
        return incheck.NOT_RUN, (
            f"needs the module '{top}', which is not installed in the smoke environment "
            f"(`{senv.base_python} -m pip install {top}`, then --deps system)\n{tail(text, 5)}"
        )
    if proc_rc == 0:
        if tc.pytest is not None:
            return incheck.PASSED, _summary_line(text) or "exit status 0"
        return incheck.PASSED, tail(text, 3).strip() or "exit status 0"
    if tc.pytest is not None and proc_rc == 5:
        return incheck.FAILED, f"pytest collected nothing for {tc.pytest}:\n{tail(text, 10)}"
    return incheck.FAILED, f"exit status {proc_rc}; last output:\n{tail(text, 15)}"
