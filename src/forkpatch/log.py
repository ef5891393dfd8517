"""Output: a command's result on stdout (:func:`result`, or :func:`emit_json` for
--json, then alone there); progress and diagnostics on stderr (info/warn/error/step),
as git and quilt do, so that `forkpatch status | less` shows the table."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from typing import Any

from forkpatch.escape import terminal
from forkpatch.redact import hide_env_secrets, hide_url_secrets, scrub

_quiet = False


def set_quiet(quiet: bool) -> None:
    global _quiet
    _quiet = quiet


def _tty() -> bool:
    return sys.stderr.isatty()


def tolerant_streams() -> None:
    """stdout and stderr show what their encoding cannot hold as backslash escapes
    (a terminal in ASCII or Latin-1, a non-UTF-8 file name): output degrades, a
    command never fails on it. --json output is ASCII already."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):
                reconfigure(errors="backslashreplace")


def shown(message: str) -> str:
    """``message`` as it may reach a terminal: credentials in URLs hidden, control
    characters and escape sequences from untrusted text written visibly, the values of
    the environment's credentials (TWINE_PASSWORD, GITHUB_TOKEN) hidden."""
    return terminal(hide_url_secrets(hide_env_secrets(message)))


def info(message: str) -> None:
    """A line for the human, on stderr (see :func:`shown`)."""
    if not _quiet:
        print(shown(message), file=sys.stderr, flush=True)


def result(message: str) -> None:
    """A line of a command's result, on stdout (never silenced by --quiet; see
    :func:`shown`)."""
    print(shown(message), flush=True)


def warn(message: str) -> None:
    prefix = "\033[33mwarning:\033[0m " if _tty() else "warning: "
    print(prefix + shown(message), file=sys.stderr, flush=True)


def error(message: str) -> None:
    prefix = "\033[31merror:\033[0m " if _tty() else "error: "
    print(prefix + shown(message), file=sys.stderr, flush=True)


def detail(message: str) -> None:
    """An indented line under an error (a tip, a note): always shown, on stderr."""
    print(shown(message), file=sys.stderr, flush=True)


@contextlib.contextmanager
def step(title: str) -> Iterator[None]:
    """Announce a step and report its duration when it ends."""
    start = time.monotonic()
    info(f"==> {title}")
    try:
        yield
    finally:
        info(f"    done in {time.monotonic() - start:.2f}s")


def emit_json(payload: Any) -> None:
    """Machine-readable output: stdout, one JSON document, stable key order."""
    sys.stdout.write(json.dumps(scrub(payload), indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()
