"""The command server: forkpatch's modules imported once, one fresh process per command.

Each ``forkpatch`` call is a Python process, and most of a short command's time is the
import of its modules (pygit2, click, the stack and the rebase), not its work. The
first ``forkpatch`` call starts a server in the background and runs its own command as
always; the next calls hand their command to the server, whose worker, forked from its
already-imported state ahead of the call, runs it. The worker takes the caller's standard streams, working
directory, environment, arguments, umask and CPU affinity, runs the command exactly as
the caller would have, and its exit status becomes the caller's. Nothing runs inside
the server itself: each worker is a copy of a process that has imported modules and
done nothing else, so one command cannot leave anything behind for the next.

- :mod:`.wire`: where a server's socket lives, which server serves which installation
  (its key), and the messages (built-ins only: the client must start fast);
- :mod:`.client`: the caller's side, used by ``forkpatch``'s console script;
- :mod:`.server`: the server and its workers.

``FORKPATCH_SERVER=0`` turns it off; ``python -m forkpatch`` never uses it.
"""

from __future__ import annotations

# Set in a worker whose caller has a controlling terminal: the worker has none (it is in
# the server's session), so a program that would ask on the terminal (ssh: a host key,
# a passphrase) cannot. An error that may come from such a question says so.
_caller_terminal = False


def caller_terminal_unreachable() -> bool:
    """Whether this process runs a command for a caller whose terminal it cannot reach."""
    return _caller_terminal


def set_caller_terminal_unreachable() -> None:
    global _caller_terminal
    _caller_terminal = True
