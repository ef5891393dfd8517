"""External build tools: the build's face on the ground-floor runner (forkpatch.proc).

Every external command a build or publish runs goes through :func:`run`: the command
is echoed on stderr, its output is kept (a bounded tail), shown only when it fails,
and a failure raises :class:`~forkpatch.errors.BuildError` naming the command, its exit
code and the last lines of its output. Values listed as secrets, and the environment's
credentials, never reach the terminal or an error message (:func:`redact`). The
command runs in its own process group, ended as a group on a timeout or Ctrl-C.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO

from forkpatch import log, proc
from forkpatch.errors import BuildError, ToolMissing
from forkpatch.escape import terminal
from forkpatch.proc import Finished
from forkpatch.redact import REDACTED, redact, redact_argv

__all__ = ["REDACTED", "format_command", "redact", "require_module", "run", "tail"]

#: How many trailing output lines a failure message carries.
TAIL_LINES = 30


def format_command(cmd: Sequence[str | os.PathLike[str]]) -> str:
    """The command as a shell would read it (for echoing and error messages)."""
    return shlex.join(os.fspath(c) for c in cmd)


def tail(text: str, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of ``text``."""
    return proc.tail(text, lines)


def require_module(module: str, *, needed_for: str, install: str) -> None:
    """Refuse, before anything is done, when ``module`` is not importable by the python
    forkpatch runs on (it runs it as ``python -m module``); ``install`` is the line that
    brings it, run with that python."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise ToolMissing(
            f"{needed_for} needs {module}, which is not installed in forkpatch's own "
            f"environment ({sys.executable})",
            tip=f"install it there: {sys.executable} -m {install}",
        )


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    what: str,
    capture: bool = True,
    stream: IO[str] | None = None,
    secrets: Iterable[str | None] = (),
    check: bool = True,
    timeout: float | None = None,
) -> Finished:
    """Run an external command for a build step.

    ``what`` says in words what the command does ("build the stand-in image");
    it leads the echo and the error. ``env`` entries are *added* to the
    current environment. With ``capture`` (the default) stdout and stderr are
    merged and their tail kept in ``Finished.output``; they are shown only on
    failure. With ``stream`` given, each output line is also written there as
    it arrives (for long builds). With ``capture=False`` the command inherits
    this process's stdout/stderr.

    Raises BuildError when the command cannot be started, runs past ``timeout``
    or (with ``check``) exits non-zero.
    """
    secrets = tuple(secrets)
    shown = redact(format_command(redact_argv([os.fspath(c) for c in cmd], secrets)), secrets)
    log.info(f"+ {shown}" + (f"  (in {cwd})" if cwd else ""))
    full_env = None
    if env is not None:
        full_env = dict(os.environ)
        full_env.update(env)
    argv = [os.fspath(c) for c in cmd]

    def write(line: str) -> None:
        assert stream is not None
        stream.write(line)
        stream.flush()

    try:
        result = proc.run(
            argv,
            cwd=cwd,
            env=full_env,
            secrets=secrets,
            timeout=timeout,
            inherit=not capture,
            on_line=write if stream is not None and capture else None,
        )
    except OSError as exc:
        raise BuildError(
            f"cannot {what}: `{shown}` did not start: {exc.strerror or exc}",
            tip=f"is `{argv[0]}` installed and on PATH?",
        ) from None
    if result.timed_out or (check and result.returncode != 0):
        output = result.output
        last = tail(output)
        if capture and stream is None and last:
            # Shown only on failure: the output kept, then the error with its tail.
            print(terminal(output.rstrip("\n")), file=sys.stderr, flush=True)
        ended = result.ended() if result.timed_out else f"exited with code {result.returncode}"
        message = f"cannot {what}: `{shown}` {ended}"
        if last:
            message += f"; last lines of its output:\n{_indent(last)}"
        raise BuildError(message)
    return result


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())
