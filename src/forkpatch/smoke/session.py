"""The long-lived check processes of one smoke run: vllm imported once per environment.

Two kinds of checks run in the smoke environment, and each kind pays vllm's import
(3-5 s of torch and vllm, more for the modules a test then imports) once, not once per
check:

- the built-in checks run one after the other in the check process
  (:mod:`forkpatch.smoke.incheck`); :func:`run_incheck_resumed` restarts it for the
  checks after one that crashed it (a CUDA fault, a segfault) or outlived its own
  deadline (:data:`CHECK_TIMEOUT_S`), so that check fails and the others still run;
- the team's pytest checks (series.yaml ``smoke.checks``) run through
  :class:`TeamServer`: a daemon in the environment (incheck/teamserver.py) that has
  imported pytest and vllm and forks each check from itself, in a session and process
  group of its own. The host runs each check as a small client process
  (incheck/teamclient.py) under :func:`forkpatch.proc.run`, so what the hardening of
  team checks holds stays as it was: the check's own timeout and the run's one
  deadline end it (the client has the server end the check's group; a client killed
  outright takes the check with it), its output is a bounded tail on disk, redacted,
  and its exit status (or the signal that ended it) is the client's. A check that
  crashes ends its child only; if the server itself goes, the check runs in a process
  of its own and the server is started again for the next one.

A team check that is a command (not a pytest node id) keeps its own process: it is a
program of the team's, not Python run by pytest.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from forkpatch import log, proc
from forkpatch.kinds import JsonObject
from forkpatch.proc import Deadline
from forkpatch.smoke import incheck

_INCHECK_DIR = Path(incheck.__file__).parent
SERVER_SCRIPT = "teamserver.py"
CLIENT_SCRIPT = "teamclient.py"
#: The client's exit status when the server could not run the check (teamclient.py).
SERVER_GONE = 111
#: What the server imports before it forks the first check.
PREIMPORT = ("vllm",)
#: How long the server may take to start (its imports); past it, checks run on their own.
START_TIMEOUT_S = 300.0


class TeamServer:
    """The team check server of one smoke environment, started at its first use."""

    def __init__(
        self,
        python: Path,
        workdir: Path,
        env: Mapping[str, str],
        deadline: Deadline,
        preimport: Sequence[str] = PREIMPORT,
    ) -> None:
        self.python, self.env, self.deadline = python, dict(env), deadline
        self.preimport = tuple(preimport)
        self.dir = workdir / "team-server"
        self.socket = self.dir / "server.sock"
        self.pid: int | None = None
        self.failed: str | None = None  # why it could not start (then checks run alone)
        self.imported: list[dict[str, Any]] = []
        self.starts = 0
        self._starting: threading.Thread | None = None

    def start_soon(self) -> None:
        """Start the server now, in the background (its imports overlap whatever the
        caller does next); :meth:`argv` waits for it."""
        if self._starting is None and self.pid is None:
            self._starting = threading.Thread(target=self._start, daemon=True)
            self._starting.start()

    def _wait_started(self) -> None:
        if self._starting is not None:
            self._starting.join()
            self._starting = None

    def argv(self, pytest_args: Sequence[str]) -> list[str] | None:
        """The client command for a pytest run of ``pytest_args`` through the server
        (started now if it is not running); None: the server cannot be had."""
        self._wait_started()
        if self.pid is None or not _alive(self.pid):
            self._start()
        if self.pid is None:
            return None
        client = self.dir / CLIENT_SCRIPT
        return [str(self.python), "-I", "-S", str(client), str(self.socket), *pytest_args]

    def _start(self) -> None:
        if self.failed is not None or self.starts >= 3:
            return
        self.starts += 1
        self.pid = None
        self.dir.mkdir(parents=True, exist_ok=True)
        for name in (SERVER_SCRIPT, CLIENT_SCRIPT):
            shutil.copyfile(_INCHECK_DIR / name, self.dir / name)
        cmd = [
            str(self.python),
            str(self.dir / SERVER_SCRIPT),
            "--socket",
            str(self.socket),
            "--host-pid",
            str(os.getpid()),
            "--preimport",
            *self.preimport,
        ]
        t0 = time.monotonic()
        try:
            done = proc.run(
                cmd,
                cwd=self.dir,
                env=self.env,
                timeout=START_TIMEOUT_S,
                deadline=self.deadline,
                log_path=self.dir / "start.log",
            )
        except OSError as exc:
            self.failed = f"cannot start it: {exc}"
            return
        report = _report(done.output)
        if done.timed_out or not report.get("ready") or not isinstance(report.get("pid"), int):
            why = done.ended() if done.timed_out else str(report.get("error") or done.ended())
            self.failed = f"it did not start ({why.strip().splitlines()[-1] if why else '?'})"
            log.warn(f"the team check server {self.failed}: each check runs on its own")
            return
        self.pid = int(report["pid"])
        self.imported = list(report.get("imported") or [])
        took = ", ".join(f"{m['module']} {m['s']:.1f}s" for m in self.imported) or "nothing"
        log.info(f"    team check server {self.pid} ready in {time.monotonic() - t0:.1f}s ({took})")
        for name, why in dict(report.get("failed") or {}).items():
            log.info(f"    (the server could not import {name}: {why}; each check imports it)")

    def gone(self) -> None:
        """The server did not run a check (the client said so): start it again next time."""
        self.stop()

    def stop(self) -> None:
        """End the server (its session); its checks have ended with their clients."""
        self._wait_started()
        pid, self.pid = self.pid, None
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
        end = time.monotonic() + proc.GRACE_S
        while time.monotonic() < end and _alive(pid):
            time.sleep(0.02)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _report(output: str) -> dict[str, Any]:
    for line in reversed(output.splitlines()):
        with contextlib.suppress(ValueError):
            data = json.loads(line)
            if isinstance(data, dict):
                return data
    return {"error": output.strip()[-500:] or "no report"}


@contextlib.contextmanager
def team_server(
    python: Path,
    workdir: Path,
    env: Mapping[str, str],
    deadline: Deadline,
    preimport: Sequence[str] = PREIMPORT,
) -> Iterator[TeamServer]:
    """A :class:`TeamServer` for the checks run inside the block, ended after it."""
    server = TeamServer(python, workdir, env, deadline, preimport)
    try:
        yield server
    finally:
        server.stop()


# --------------------------------------------------------------------------- built-in checks

#: The longest one built-in check may run before the host ends the check process and
#: reports it failed (the others run in a fresh one); the run's --timeout still caps all.
CHECK_TIMEOUT_S = 1200.0


class CheckOverran(Exception):
    """A built-in check ran past :data:`CHECK_TIMEOUT_S` (raised from the tick)."""

    def __init__(self, check_id: str, seconds: float) -> None:
        super().__init__(check_id)
        self.check_id, self.seconds = check_id, seconds


RunOnce = Callable[[Sequence[str]], tuple[list[JsonObject], str]]


def run_incheck_resumed(
    ids: Sequence[str], run_once: RunOnce, *, deadline: Deadline, attempts: int = 4
) -> tuple[list[JsonObject], str]:
    """Run the built-in checks ``ids`` through ``run_once`` (one check process for the
    ids it is given: its records and how it ended) until each has a result: after a
    process that ended while a check ran (a crash, or :class:`CheckOverran`), that
    check is reported failed with how the process ended and a fresh process runs the
    checks after it. At most ``attempts`` processes (a wheel that crashes every check
    gets the rest reported as not run by the last one's end)."""
    records: list[JsonObject] = []
    note = "exited normally"
    left = list(ids)
    for _ in range(attempts):
        got, note = run_once(left)
        seen_env = any(r.get("kind") == "env" for r in records)
        records.extend(r for r in got if not (seen_env and r.get("kind") == "env"))
        done = {str(r.get("id")) for r in got if r.get("kind") == "check"}
        running = None
        for rec in got:
            if rec.get("kind") == "start":
                running = str(rec.get("id"))
            elif rec.get("kind") == "check":
                running = None
        if running is None or running in done:
            break
        records.append(
            {
                "kind": "check",
                "id": running,
                "outcome": incheck.FAILED,
                "duration_s": 0.0,
                "detail": f"the check process ended while running it: {note}; the checks "
                "after it ran in a fresh check process",
            }
        )
        done.add(running)
        left = [cid for cid in left if cid not in done]
        if not left or deadline.expired:
            break  # past the run's deadline the rest are reported as not reached
        log.warn(
            f"{running} ended the check process ({note.splitlines()[0]}); {len(left)} "
            "check(s) after it run in a fresh one"
        )
    return records, note
