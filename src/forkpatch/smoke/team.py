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

import io
import os
import re
import subprocess
import tarfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forkpatch import log
from forkpatch.sections import TeamCheck
from forkpatch.smoke import incheck
from forkpatch.smoke.env import SmokeEnv, clean_env
from forkpatch.smoke.report import CheckResult
from forkpatch.wheels.runner import tail

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
        tf.extractall(dest, filter="data")
    return dest


def _gate(tier: str, device: Mapping[str, Any]) -> str | None:
    needs = {"gpu": ("cuda",), "gpu-jit": ("cuda",), "sm70": ("cuda", "sm70")}.get(tier, ())
    return incheck.gate(incheck.CheckDef("team", tier, lambda _ctx: None, needs), dict(device))


def _has_pytest(python: Path, env: Mapping[str, str]) -> bool:
    probe = [str(python), "-c", "import pytest"]
    return subprocess.run(probe, env=dict(env), capture_output=True, check=False).returncode == 0


def run_team_checks(
    checks: Mapping[str, TeamCheck],
    senv: SmokeEnv,
    plan: Mapping[str, Sequence[str]],
    *,
    device: Mapping[str, Any],
    root: Path | None,
    fork_tests: Callable[[], Path],
) -> dict[str, CheckResult]:
    """Run the team's ``checks`` in ``senv``; one result per check."""
    env = clean_env()
    env["PATH"] = os.pathsep.join([str(senv.bin_dir), env.get("PATH", "")])
    env["VIRTUAL_ENV"] = str(senv.path)
    out: dict[str, CheckResult] = {}
    for cid, tc in checks.items():
        tier = cid.partition(".")[0]
        t0 = time.monotonic()
        outcome, detail = _run_one(cid, tc, tier, senv, env, device, root, fork_tests)
        out[cid] = CheckResult(
            cid, tier, outcome, time.monotonic() - t0, detail, list(plan.get(cid, []))
        )
        log.info(f"    [team] {outcome:<8} {cid} ({time.monotonic() - t0:.1f}s)")
    return out


def _run_one(
    cid: str,
    tc: TeamCheck,
    tier: str,
    senv: SmokeEnv,
    env: Mapping[str, str],
    device: Mapping[str, Any],
    root: Path | None,
    fork_tests: Callable[[], Path],
) -> tuple[str, str]:
    why = _gate(tier, device)
    if why is not None:
        return incheck.NOT_RUN, why
    if tc.pytest is not None:
        if not _has_pytest(senv.python, env):
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
        cmd = [str(senv.python), "-m", "pytest", "-q", "-p", "no:cacheprovider", tc.pytest]
    else:
        cmd = list(tc.command or ())
        if root is None:
            return incheck.NOT_RUN, "no project directory to run the command in"
        cwd = root
    log.info(f"+ {' '.join(cmd)}  (in {cwd})")
    timeout = tc.timeout or DEFAULT_TIMEOUT_S
    try:
        proc = subprocess.run(
            cmd,
            cwd=cwd,
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        text = (exc.stdout or b"").decode("utf-8", "replace")
        return incheck.FAILED, f"timed out after {timeout} s; last output:\n{tail(text, 15)}"
    except OSError as exc:
        return incheck.ERROR, f"cannot run {cmd[0]}: {exc}"
    text = proc.stdout.decode("utf-8", "replace")
    missing = _MISSING.search(text) if proc.returncode != 0 else None
    if missing is not None and missing.group(1).split(".")[0] not in ("vllm", "forkpatch"):
        # A module the environment lacks (a test requirement of the fork's, say) is
        # not the wheel's fault: the check could not run here.
        top = missing.group(1).split(".")[0]
        return incheck.NOT_RUN, (
            f"needs the module '{top}', which is not installed in the smoke environment "
            f"(`{senv.base_python} -m pip install {top}`, then --deps system)\n{tail(text, 5)}"
        )
    if proc.returncode == 0:
        return incheck.PASSED, tail(text, 3).strip() or "exit status 0"
    if tc.pytest is not None and proc.returncode == 5:
        return incheck.FAILED, f"pytest collected nothing for {tc.pytest}:\n{tail(text, 10)}"
    return incheck.FAILED, f"exit status {proc.returncode}; last output:\n{tail(text, 15)}"
