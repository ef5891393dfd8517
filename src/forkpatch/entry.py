"""The ``forkpatch`` program's entry point: Ctrl-C is handled from the first instant.

Importing the command line (click, the core modules) takes a noticeable part of a
second. A Ctrl-C in that time would otherwise print a KeyboardInterrupt traceback
from the middle of an import. Until :func:`forkpatch.cli.main` takes over (it
puts Python's own handler back, inside its error handling), a Ctrl-C ends the
process at once with a line saying that nothing was done: nothing has been read
or written by then.
"""

from __future__ import annotations

# Only built-in modules before the handler is in place: ``_signal`` is ``signal``
# without its enum wrappers (which load enum, and with it a few more modules).
import _signal  # type: ignore[import-not-found]  # no stubs: the C half of signal
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType

STARTING = b"forkpatch: interrupted while starting; nothing was changed\n"


def _while_starting(signum: int, frame: FrameType | None) -> None:
    os.write(2, STARTING)
    os._exit(130)


def main() -> int:
    _signal.signal(_signal.SIGINT, _while_starting)
    from forkpatch import settings

    if settings.text("FORKPATCH_TEST_PAUSE_AFTER") == "start":  # test hook, as in rebase/run.py
        os.kill(os.getpid(), _signal.SIGSTOP)
    from forkpatch.cli import main as cli_main

    code = cli_main()
    # The command has ended and its status is known: a Ctrl-C now would only turn that
    # status into a death by signal on the way out.
    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
    return code
