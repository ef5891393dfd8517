"""The ``forkpatch`` program's entry point: Ctrl-C is handled from the first instant.

Importing the command line (click, the core modules) takes a noticeable part of a
second. A Ctrl-C in that time would otherwise print a KeyboardInterrupt traceback
from the middle of an import. Until :func:`forkpatch.cli.main` takes over (it
puts Python's own handler back, inside its error handling), a Ctrl-C ends the
process at once with a line saying that nothing was done: nothing has been read
or written by then.
"""

from __future__ import annotations

import os
import signal
from types import FrameType

from forkpatch import settings

STARTING = b"forkpatch: interrupted while starting; nothing was changed\n"


def _while_starting(signum: int, frame: FrameType | None) -> None:
    os.write(2, STARTING)
    os._exit(130)


def main() -> int:
    signal.signal(signal.SIGINT, _while_starting)
    if settings.text("FORKPATCH_TEST_PAUSE_AFTER") == "start":  # test hook, as in rebase/run.py
        os.kill(os.getpid(), signal.SIGSTOP)
    from forkpatch.cli import main as cli_main

    return cli_main()
