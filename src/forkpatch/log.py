"""Human progress output on stderr; machine output (--json) goes to stdout only."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from typing import Any

from forkpatch.redact import hide_url_secrets, scrub

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


def info(message: str) -> None:
    """A line for the human, on stderr (credentials in URLs hidden, as everywhere here)."""
    if not _quiet:
        print(hide_url_secrets(message), file=sys.stderr, flush=True)


def warn(message: str) -> None:
    prefix = "\033[33mwarning:\033[0m " if _tty() else "warning: "
    print(prefix + hide_url_secrets(message), file=sys.stderr, flush=True)


def error(message: str) -> None:
    prefix = "\033[31merror:\033[0m " if _tty() else "error: "
    print(prefix + hide_url_secrets(message), file=sys.stderr, flush=True)


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
