"""One runner for external build tools.

Every external command a build runs goes through :func:`run`: the command is
echoed on stderr, its output is kept, shown only when it fails, and a failure
raises :class:`~forkpatch.errors.BuildError` naming the command, its exit
code and the last lines of its output. Values listed as secrets never reach
the terminal or an error message (:func:`redact`).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO

from forkpatch import log
from forkpatch.errors import BuildError, ToolMissing
from forkpatch.escape import terminal
from forkpatch.redact import REDACTED, redact, redact_argv

__all__ = ["REDACTED", "format_command", "redact", "require_module", "run", "tail"]

#: How many trailing output lines a failure message carries.
TAIL_LINES = 30


def format_command(cmd: Sequence[str | os.PathLike[str]]) -> str:
    """The command as a shell would read it (for echoing and error messages)."""
    return shlex.join(os.fspath(c) for c in cmd)


def tail(text: str, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of ``text``."""
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


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
) -> subprocess.CompletedProcess[str]:
    """Run an external command for a build step.

    ``what`` says in words what the command does ("build the stand-in image");
    it leads the echo and the error. ``env`` entries are *added* to the
    current environment. With ``capture`` (the default) stdout and stderr are
    merged and kept in ``CompletedProcess.stdout``; they are shown only on
    failure. With ``stream`` given, each output line is also written there as
    it arrives (for long builds). With ``capture=False`` the command inherits
    this process's stdout/stderr.

    Raises BuildError when the command cannot be started or (with ``check``)
    exits non-zero.
    """
    secrets = tuple(secrets)
    shown = redact(format_command(redact_argv([os.fspath(c) for c in cmd], secrets)), secrets)
    log.info(f"+ {shown}" + (f"  (in {cwd})" if cwd else ""))
    full_env = None
    if env is not None:
        full_env = dict(os.environ)
        full_env.update(env)
    argv = [os.fspath(c) for c in cmd]
    try:
        if not capture:
            code = subprocess.run(argv, cwd=cwd, env=full_env, check=False).returncode
            result = subprocess.CompletedProcess(argv, code, "", "")
        elif stream is None:
            done = subprocess.run(
                argv,
                cwd=cwd,
                env=full_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                encoding="utf-8",
                errors="replace",
                check=False,
            )
            result = subprocess.CompletedProcess(argv, done.returncode, done.stdout, "")
        else:
            result = _run_streaming(argv, cwd, full_env, stream, secrets)
    except OSError as exc:
        raise BuildError(
            f"cannot {what}: `{shown}` did not start: {exc.strerror or exc}",
            tip=f"is `{argv[0]}` installed and on PATH?",
        ) from None
    if check and result.returncode != 0:
        output = redact(result.stdout or "", secrets)
        last = tail(output)
        if capture and stream is None and last:
            # Shown only on failure: the full output, then the error with its tail.
            print(terminal(output.rstrip("\n")), file=sys.stderr, flush=True)
        message = f"cannot {what}: `{shown}` exited with code {result.returncode}"
        if last:
            message += f"; last lines of its output:\n{_indent(last)}"
        raise BuildError(message)
    return result


def _run_streaming(
    argv: list[str],
    cwd: Path | None,
    env: Mapping[str, str] | None,
    stream: IO[str],
    secrets: tuple[str | None, ...],
) -> subprocess.CompletedProcess[str]:
    chunks: list[str] = []
    with subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        encoding="utf-8",
        errors="replace",
        bufsize=1,
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            chunks.append(line)
            stream.write(redact(line, secrets))
            stream.flush()
        returncode = proc.wait()
    return subprocess.CompletedProcess(argv, returncode, "".join(chunks), "")


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())
