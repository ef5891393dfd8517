"""One team pytest check through the team check server (teamserver.py).

Run in the smoke environment by path, as a script, with the standard library alone
(``python -I -S teamclient.py SOCKET ARGV...``): it sends ``ARGV`` (pytest's arguments),
its working directory, its environment and its own stdin, stdout and stderr to the
server, which forks the check from a process that has vllm imported already. It exits
as the check did: with its exit status, or killed by the same signal. At SIGTERM or
SIGINT (the host's timeout) it has the server end the check's group, waits a moment
for that, and ends; if it is killed outright, the server sees it go and ends the check.
If the server cannot be reached or ends, it says so on stderr and exits
:data:`SERVER_GONE`, so the host runs the check on its own instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import time

#: The exit status when the server cannot run the check (the host then runs it itself).
SERVER_GONE = 111
GRACE_S = 1.5


def main(argv: list[str]) -> int:
    path, args = argv[0], argv[1:]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        msg = {"argv": args, "cwd": os.getcwd(), "env": dict(os.environ)}
        socket.send_fds(sock, [(json.dumps(msg) + "\n").encode("utf-8")], [0, 1, 2])
    except OSError as exc:
        print(f"forkpatch: the team check server is not there ({exc})", file=sys.stderr)
        return SERVER_GONE
    stopping: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        if not stopping:
            stopping.append(signum)
            with contextlib.suppress(OSError):
                sock.sendall((json.dumps({"kill": int(signal.SIGTERM)}) + "\n").encode())

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    buf = b""
    child: list[int] = []
    killed_at = 0.0
    sock.settimeout(0.2)
    while True:
        if stopping and not killed_at:
            killed_at = time.monotonic()
        if killed_at and time.monotonic() - killed_at > GRACE_S:
            with contextlib.suppress(OSError):  # the check ignored SIGTERM: SIGKILL its group
                sock.sendall((json.dumps({"kill": int(signal.SIGKILL)}) + "\n").encode())
            killed_at = float("inf")
        try:
            chunk = sock.recv(4096)
        except TimeoutError:
            continue
        except OSError:
            chunk = b""
        if not chunk:
            if child:  # its check must not outlive it: the host runs it again on its own
                with contextlib.suppress(OSError):
                    os.killpg(child[0], signal.SIGKILL)
            print("forkpatch: the team check server ended before the check", file=sys.stderr)
            return SERVER_GONE
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            reply = json.loads(line)
            if "pid" in reply:
                child.append(int(reply["pid"]))
            if "signal" in reply:  # ended by a signal: so is this process, by the same one
                signum = int(reply["signal"])
                # (SIGKILL's handler cannot be set: it is the default already)
                with contextlib.suppress(OSError, ValueError):
                    signal.signal(signum, signal.SIG_DFL)
                sys.stdout.flush()
                os.kill(os.getpid(), signum)
                time.sleep(1)
                return 128 + int(reply["signal"])
            if "status" in reply:
                return int(reply["status"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
