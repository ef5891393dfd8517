"""The ``forkpatch`` program's entry point: Ctrl-C is handled from the first instant.

Importing the command line (click, the core modules) takes a noticeable part of a
second. A Ctrl-C in that time would otherwise print a KeyboardInterrupt traceback
from the middle of an import. Until :func:`forkpatch.cli.main` takes over (it
puts Python's own handler back, inside its error handling), a Ctrl-C ends the
process at once with a line saying that nothing was done: nothing has been read
or written by then.

The console script (:func:`main`) first offers its command to a command server
(:mod:`forkpatch.cmdserver`), which runs it in a process that has imported all this
already; without one it runs here (:func:`run_here`), as ``python -m forkpatch``
always does.
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
    """The ``forkpatch`` console script: the command server's run, else this process's."""
    _signal.signal(_signal.SIGINT, _while_starting)
    from forkpatch.cmdserver.client import served

    code = served()
    return run_here() if code is None else code


def run_here() -> int:
    """The command of ``sys.argv``, run in this process."""
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
