"""The command server: a served command answers exactly as the caller's own process
would have (output, exit status, working directory, environment, umask, encodings,
signals), and a server that cannot be trusted to (changed code, an unsafe directory,
a bad request) is not used.

Real processes throughout: the client is the console script's code (``forkpatch.entry``)
run by this interpreter, the server the one it starts; each test has its own runtime
directory and stops its servers at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import REPO_ROOT
from support.cli import env
from support.projects import copy_example, snapshot

# The console script, with a note of whether a server ran the command (for the tests:
# the client itself leaves no trace of it).
CLIENT = """
import os, sys
import _signal
sys.argv[0] = "forkpatch"
from forkpatch import entry
from forkpatch.cmdserver.client import served
_signal.signal(_signal.SIGINT, entry._while_starting)
code = served()
with open(os.environ["FPTEST_HOW"], "a") as fh:
    fh.write("here\\n" if code is None else "served\\n")
sys.exit(entry.run_here() if code is None else code)
"""


class Calls:
    """forkpatch called as a user's shell calls it, in one runtime directory."""

    def __init__(self, runtime: Path, tmp: Path) -> None:
        self.runtime = runtime
        self.how = tmp / "how.log"
        self.how.touch()

    def env(self, **extra: str) -> dict[str, str]:
        here = {"XDG_RUNTIME_DIR": str(self.runtime), "FPTEST_HOW": str(self.how)}
        return env(**{**here, "FORKPATCH_SERVER": "1", **extra})

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-c", CLIENT, *args]

    def __call__(
        self, cwd: Path, *args: str, stdin: int | None = subprocess.DEVNULL, **extra: str
    ) -> tuple[int, str, str, str]:
        """(exit status, stdout, stderr, "served" or "here")."""
        before = self.how.read_text().count("\n")
        p = subprocess.run(
            self.argv(*args),
            cwd=cwd,
            env=self.env(**extra),
            capture_output=True,
            text=True,
            stdin=stdin,
            timeout=120,
            check=False,
        )
        lines = self.how.read_text().splitlines()
        how = lines[before] if len(lines) > before else "none"
        return p.returncode, p.stdout, p.stderr, how

    def up(self, cwd: Path) -> int:
        """Start this installation's server (one call runs here and starts it) and wait
        until it listens; its pid."""
        self(cwd, "--version")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            socks = list(self.runtime.glob("forkpatch-*/*.sock"))
            if socks:
                return int(socks[0].with_suffix(".lock").read_text())
            time.sleep(0.05)
        raise AssertionError("no server came up")


def _in_process(cwd: Path, *args: str, **extra: str) -> tuple[int, str, str]:
    p = subprocess.run(
        [sys.executable, "-m", "forkpatch", *args],
        cwd=cwd,
        env=env(**extra),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )
    return p.returncode, p.stdout, p.stderr


def _stop_all(runtime: Path) -> None:
    for lock in runtime.glob("forkpatch-*/*.lock"):
        text = lock.read_text().strip()
        if text.isdigit():
            try:
                os.kill(int(text), signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and _alive(int(text)):
                time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture
def calls(tmp_path: Path) -> Iterator[Calls]:
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    c = Calls(runtime, tmp_path)
    try:
        yield c
    finally:
        _stop_all(runtime)


@pytest.fixture
def two(tmp_path: Path, capsys) -> tuple[Path, Path]:
    """Two copies of the example project: one for the served calls, one in-process."""
    a = copy_example(tmp_path / "a", capsys).project
    b = copy_example(tmp_path / "b", capsys).project
    return a, b


def _same(served: tuple[int, str, str, str], here: tuple[int, str, str], a: Path, b: Path):
    code, out, err, how = served
    assert how == "served", err
    norm = (code, out.replace(str(a.parent), "ROOT"), err.replace(str(a.parent), "ROOT"))
    theirs = (
        here[0],
        here[1].replace(str(b.parent), "ROOT"),
        here[2].replace(str(b.parent), "ROOT"),
    )
    assert norm == theirs


EDIT_LOOP = [
    ("status",),
    ("status", "--json"),
    ("top",),
    ("pop",),
    ("push",),
    ("edit", "odd-width-padding"),
    ("refresh",),
    ("push", "--all"),
    ("series",),
    ("--version",),
    ("nosuch",),
    ("push", "no-such-patch"),
    ("-C", "/nonexistent/dir", "status"),
    ("rebase", "--onto", "v1.3.0"),
    ("status", "--json"),
]


def test_a_served_edit_loop_answers_as_its_own_process_would(calls, two):
    a, b = two
    calls.up(a)
    for args in EDIT_LOOP:
        _same(calls(a, *args), _in_process(b, *args), a, b)
    # The same bytes written on both sides (series.yaml names its own copy of the fork).
    mine = {k: v.replace(bytes(a.parent), b"ROOT") for k, v in snapshot(a).items()}
    assert mine == {k: v.replace(bytes(b.parent), b"ROOT") for k, v in snapshot(b).items()}


def test_settings_cwd_umask_and_encodings_are_the_callers(calls, two, tmp_path):
    a, b = two
    calls.up(a)
    # A bad setting of the caller's environment (the server's has none).
    _same(
        calls(a, "top", FORKPATCH_DEBUG="maybe"),
        _in_process(b, "top", FORKPATCH_DEBUG="maybe"),
        a,
        b,
    )
    # The working directory: a subdirectory of the project finds its series.yaml.
    _same(calls(a / "patches", "top"), _in_process(b / "patches", "top"), a, b)
    # An ASCII stdout: what it cannot hold is escaped the same way.
    odd = tmp_path / "caf\u00e9"
    odd.mkdir()
    _same(
        calls(odd, "status", PYTHONIOENCODING="ascii"),
        _in_process(odd, "status", PYTHONIOENCODING="ascii"),
        a,
        b,
    )
    # The umask: a new patch's file is written under the caller's 077.
    _same(calls(a, "apply"), _in_process(b, "apply"), a, b)
    for project, argv, e in (
        (a, calls.argv("new", "private"), calls.env()),
        (b, [sys.executable, "-m", "forkpatch", "new", "private"], env()),
    ):
        p = subprocess.run(
            argv,
            cwd=project,
            env=e,
            capture_output=True,
            text=True,
            check=False,
            preexec_fn=lambda: os.umask(0o077),
        )
        assert p.returncode == 0, p.stderr
    mode = lambda p: (p / "series.yaml").stat().st_mode & 0o777  # noqa: E731
    assert mode(a) == mode(b)
    # stdin is the caller's: a closed one is seen as closed.
    _same(calls(a, "top", stdin=None), _in_process(b, "top"), a, b)
    assert calls.how.read_text().count("served") >= 5


def _processes() -> Iterator[tuple[int, int, str]]:
    """(pid, parent's pid, state) of every process /proc shows."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        yield int(proc.name), int(fields[1]), fields[0]


def _worker_of(server: int, timeout: float = 30) -> int:
    """The pid of the server's worker that has stopped itself at a test pause."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid, parent, state in _processes():
            if parent == server and state == "T":
                return pid
        time.sleep(0.02)
    raise AssertionError("no worker stopped at the pause")


def _paused_rebase(calls: Calls, project: Path) -> tuple[subprocess.Popen[str], int]:
    server = calls.up(project)
    proc = subprocess.Popen(
        calls.argv("rebase", "--onto", "v1.3.0"),
        cwd=project,
        env=calls.env(FORKPATCH_TEST_PAUSE_AFTER="journal"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, _worker_of(server)


def test_a_ctrl_c_reaches_the_served_command(calls, two):
    a, b = two
    proc, worker = _paused_rebase(calls, a)
    here = subprocess.Popen(
        [sys.executable, "-m", "forkpatch", "rebase", "--onto", "v1.3.0"],
        cwd=b,
        env=env(FORKPATCH_TEST_PAUSE_AFTER="journal"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, status = os.waitpid(here.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status)
    # The terminal's Ctrl-C reaches the client (the server forwards it to its worker),
    # and the process of its own; each then goes on from its pause.
    proc.send_signal(signal.SIGINT)
    here.send_signal(signal.SIGINT)
    time.sleep(0.3)
    os.kill(worker, signal.SIGCONT)
    os.kill(here.pid, signal.SIGCONT)
    served_out, served_err = proc.communicate(timeout=60)
    assert served_out == ""  # nothing on stdout from an interrupted rebase, either way
    here_out, here_err = here.communicate(timeout=60)
    assert here_out == ""
    assert proc.returncode == here.returncode == 130, served_err
    assert served_err.replace(str(a.parent), "ROOT") == here_err.replace(str(b.parent), "ROOT")
    assert "interrupted" in served_err
    # As after a Ctrl-C in the command's own process: the rebase goes back.
    _same(calls(a, "rebase", "--abort"), _in_process(b, "rebase", "--abort"), a, b)


def test_a_killed_caller_takes_its_command_with_it(calls, tmp_path, capsys):
    ex = copy_example(tmp_path / "ex", capsys)
    proc, worker = _paused_rebase(calls, ex.project)
    proc.kill()
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(worker)  # SIGKILLed by the server, as the caller was
    # The rebase it left is recoverable, as after any SIGKILL.
    code, _, err, how = calls(ex.project, "rebase", "--continue")
    assert (code, how) == (0, "served"), err


def test_a_worker_killed_by_a_signal_ends_its_caller_by_it(calls, tmp_path, capsys):
    ex = copy_example(tmp_path / "ex", capsys)
    proc, worker = _paused_rebase(calls, ex.project)
    os.kill(worker, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def test_a_changed_module_stops_the_server_and_its_command_runs_here(calls, tmp_path, capsys):
    copy = tmp_path / "src"
    shutil.copytree(
        REPO_ROOT / "src" / "forkpatch",
        copy / "forkpatch",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    ex = copy_example(tmp_path / "ex", capsys)
    pypath = {"PYTHONPATH": str(copy)}
    calls(ex.project, "--version", **pypath)
    first = _wait_server(calls)
    assert calls(ex.project, "status", **pypath)[3] == "served"
    views = copy / "forkpatch" / "views.py"
    views.write_text(views.read_text() + "\n# changed\n")
    code, _, _, how = calls(ex.project, "status", **pypath)
    assert (code, how) == (0, "here")
    second = _wait_server(calls, other_than=first)
    assert second != first and not _alive(first)
    assert calls(ex.project, "status", **pypath)[3] == "served"


def _wait_server(calls: Calls, other_than: int | None = None) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for sock in calls.runtime.glob("forkpatch-*/*.sock"):
            text = sock.with_suffix(".lock").read_text().strip()
            if text.isdigit() and int(text) != other_than and _alive(int(text)):
                return int(text)
        time.sleep(0.05)
    raise AssertionError("no server came up")


@pytest.mark.parametrize("how", ["open to others", "a symlink", "a file"])
def test_an_unsafe_runtime_directory_is_not_used(calls, tmp_path, capsys, how):
    ex = copy_example(tmp_path / "ex", capsys)
    place = calls.runtime / f"forkpatch-{os.getuid()}"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    if how == "open to others":
        place.mkdir(mode=0o700)
        place.chmod(0o755)
    elif how == "a symlink":
        place.symlink_to(elsewhere)
    else:
        place.write_text("")
    for _ in range(3):
        code, _, _, served = calls(ex.project, "status")
        assert (code, served) == (0, "here")
    time.sleep(0.5)
    assert not list(tmp_path.rglob("*.sock"))


@pytest.mark.parametrize("how", ["FORKPATCH_SERVER=0", "python -m forkpatch"])
def test_turned_off_or_python_m_no_server_is_started(calls, tmp_path, capsys, how):
    ex = copy_example(tmp_path / "ex", capsys)
    for _ in range(2):
        if how == "python -m forkpatch":
            here = {"XDG_RUNTIME_DIR": str(calls.runtime), "FORKPATCH_SERVER": "1"}
            assert _in_process(ex.project, "status", **here)[0] == 0
        else:
            assert calls(ex.project, "status", FORKPATCH_SERVER="0")[3] == "here"
    time.sleep(0.5)
    assert not list(calls.runtime.rglob("*"))


def test_a_bad_setting_of_forkpatch_server_is_reported(calls, tmp_path, capsys):
    ex = copy_example(tmp_path / "ex", capsys)
    code, _, err, how = calls(ex.project, "top", FORKPATCH_SERVER="sometimes")
    assert (code, how) == (2, "here")
    assert "FORKPATCH_SERVER='sometimes' is not a boolean" in err


@pytest.mark.parametrize(
    "request_bytes",
    [b"garbage\n", b"0000000005\nhello", b"9999999999\n", b""],
    ids=["no header", "not a request", "too long", "nothing"],
)
def test_a_bad_request_is_refused_and_the_server_goes_on(calls, tmp_path, capsys, request_bytes):
    ex = copy_example(tmp_path / "ex", capsys)
    calls.up(ex.project)
    (path,) = calls.runtime.glob("forkpatch-*/*.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(path))
        fds = [os.open(".", os.O_RDONLY), 0, 1, 2] if request_bytes else []
        ancillary = (
            [
                (
                    socket.SOL_SOCKET,
                    socket.SCM_RIGHTS,
                    bytes(memoryview(__import__("array").array("i", fds))),
                )
            ]
            if fds
            else []
        )
        s.sendmsg([request_bytes or b"x"], ancillary)
        if fds:
            os.close(fds[0])
        s.shutdown(socket.SHUT_WR)
        answer = s.recv(4096)
    assert answer.startswith(b"refused ")
    code, _, _, how = calls(ex.project, "status")
    assert (code, how) == (0, "served")


def test_the_server_command_shows_and_stops_it(calls, tmp_path, capsys):
    ex = copy_example(tmp_path / "ex", capsys)
    pid = calls.up(ex.project)
    code, out, _, _ = calls(ex.project, "server")
    assert code == 0 and f"running: pid {pid}" in out
    code, out, _, how = calls(ex.project, "server", "stop")
    assert (code, out.strip(), how) == (0, "stopped 1 server(s)", "served")
    deadline = time.monotonic() + 10  # it ends once it has reported this very command
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(pid)
    code, out, _, how = calls(ex.project, "server")
    assert (code, how) == (0, "here") and "no server is running" in out
    time.sleep(0.5)
    assert not list(calls.runtime.glob("forkpatch-*/*.sock"))  # `server` started none


def test_status_json_is_stdout_alone_when_served(calls, two):
    a, _ = two
    calls.up(a)
    code, out, _, how = calls(a, "status", "--json")
    assert (code, how) == (0, "served")
    assert json.loads(out)["patches"]


def _on_a_terminal(calls: Calls, cwd: Path, *args: str, **extra: str) -> tuple[int, str]:
    """The client run on a pseudo-terminal that is its controlling terminal, as in a
    shell: (exit status, what it wrote there)."""
    import pty

    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child execs at once
        try:
            os.chdir(cwd)
            os.execve(sys.executable, calls.argv(*args), calls.env(**extra))
        finally:
            os._exit(127)
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.parametrize("server", ["1", "0"])
def test_a_fetch_that_ssh_could_not_ask_for_says_how_to_run_it_on_the_terminal(
    calls, tmp_path, capsys, server
):
    ex = copy_example(tmp_path / "ex", capsys)
    calls.up(ex.project)
    new = tmp_path / "new"
    new.mkdir()
    url = "https://127.0.0.1:9/fork.git"  # nothing listens: the fetch fails
    code, shown = _on_a_terminal(
        calls, new, "init", "--fork-url", url, "--base", "v1", FORKPATCH_SERVER=server
    )
    assert code == 1, shown
    assert "cannot list" in shown or "cannot fetch" in shown
    assert calls.how.read_text().splitlines()[-1] == ("served" if server == "1" else "here")
    # Only the served command lacked the terminal; without one, nothing to say.
    assert ("FORKPATCH_SERVER=0 forkpatch" in shown) == (server == "1")
    code, _, err, how = calls(new, "init", "--fork-url", url, "--base", "v1")
    assert (code, how) == (1, "served") and "FORKPATCH_SERVER=0" not in err


# What the caller's process may import besides the interpreter's own start-up: the client,
# the package's name, modules built into the interpreter, `_socket` (socket's C half) and
# `__future__` (a few lines). Nothing that loads Python modules of its own (re, enum, ...).
CLIENT_MODULES = {"forkpatch", "forkpatch.entry", "forkpatch.cmdserver", "_socket", "__future__"}


def _imported(importtime: str) -> set[str]:
    """The modules ``python -X importtime`` reported on its standard error."""
    return {
        line.rpartition("|")[2].strip()
        for line in importtime.splitlines()
        if line.startswith("import time:") and "|" in line
    } - {"imported package"}  # the header line


def test_the_installed_command_imports_only_the_client_when_served(calls, tmp_path, capsys):
    ex = copy_example(tmp_path / "ex", capsys)
    script = [sys.executable, "-X", "importtime", str(REPO_ROOT / "scripts" / "forkpatch")]

    def imported(*args: str) -> tuple[int, set[str]]:
        p = subprocess.run(
            [*script, *args],
            cwd=ex.project,
            env=calls.env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return p.returncode, _imported(p.stderr)

    first, _ = imported("--version")  # runs here and starts the server for -X importtime
    assert first == 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        code, names = imported("--version")
        if "forkpatch.cmdserver.client" in names and "forkpatch.cli" not in names:
            break  # served: the command's own imports were the server's
        time.sleep(0.1)
    else:
        raise AssertionError("the command was never served")
    assert code == 0
    baseline = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "pass"],
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    extra = {
        n
        for n in names - _imported(baseline) - set(sys.builtin_module_names)
        if not n.startswith("forkpatch.cmdserver.")
    }
    assert extra - CLIENT_MODULES == set(), "the caller's process imports more than the client"
    assert "re" not in names and "enum" not in names


def _children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid``."""
    return [child for child, parent, state in _processes() if parent == pid and state != "Z"]


def _spare_of(server: int, other_than: int | None = None) -> int:
    """The server's one child between commands: the next command's worker, forked ahead."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        kids = [k for k in _children(server) if k != other_than]
        if len(kids) == 1:
            return kids[0]
        time.sleep(0.02)
    raise AssertionError(f"no single spare worker: {_children(server)}")


def test_the_next_command_runs_in_the_worker_forked_ahead(calls, tmp_path, capsys):
    ex = copy_example(tmp_path / "ex", capsys)
    server = calls.up(ex.project)
    spare = _spare_of(server)
    proc = subprocess.Popen(
        calls.argv("rebase", "--onto", "v1.3.0"),
        cwd=ex.project,
        env=calls.env(FORKPATCH_TEST_PAUSE_AFTER="journal"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    worker = _worker_of(server)
    assert worker == spare  # the rebase stopped itself in the spare
    time.sleep(0.2)
    assert _children(server) == [worker]  # no spare is forked while a command runs
    os.kill(worker, signal.SIGCONT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert calls(ex.project, "status")[:1] == (0,)
    new = _spare_of(server)
    assert new not in (spare, worker)


def test_a_spare_killed_while_it_waits_is_not_used(calls, tmp_path, capsys):
    ex = copy_example(tmp_path / "ex", capsys)
    server = calls.up(ex.project)
    spare = _spare_of(server)
    os.kill(spare, signal.SIGKILL)
    while _alive(spare):
        time.sleep(0.02)
    code, out, err, how = calls(ex.project, "status")
    assert (code, how) == (0, "served"), err
    assert code == _in_process(ex.project, "status")[0] and "capability-floor" in out
    assert _spare_of(server) != spare


def test_the_spare_ends_with_its_server(calls, tmp_path, capsys):
    ex = copy_example(tmp_path / "ex", capsys)
    server = calls.up(ex.project)
    spare = _spare_of(server)
    assert calls(ex.project, "server", "stop")[0] == 0
    deadline = time.monotonic() + 10
    while (_alive(spare) or _alive(server)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(spare) and not _alive(server)


def test_a_served_command_is_done_and_has_let_go_when_its_caller_returns(calls, two):
    """The worker tells the caller its status itself, before its own end: by then the
    command has done all it does, the project's lock is free (the next command, started
    at once, takes it: a running holder would be refused) and the caller's streams
    are closed (a caller reading them, as `$(forkpatch top)` does, sees their end)."""
    a, _ = two
    calls.up(a)
    assert calls(a, "apply")[0] == 0
    for i in range(5):
        code, _, err, how = calls(a, "new", f"quick-{i}")
        assert (code, how) == (0, "served"), err
        assert f"name: quick-{i}" in (a / "series.yaml").read_text()
        proc = subprocess.Popen(
            calls.argv("top"),
            cwd=a,
            env=calls.env(),
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        assert proc.stdout is not None
        top = proc.stdout.read()  # returns at the streams' end, whoever holds them
        assert proc.wait(timeout=30) == 0 and top.strip() == f"quick-{i}".encode()


def _dirty_kb(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("Private_Dirty", "Shared_Dirty"):
            fields[name] = int(value.split()[0])
    return fields


def test_the_spare_has_its_own_copy_of_the_servers_memory_before_its_command(
    calls, tmp_path, capsys
):
    """A command in a worker that shares the server's pages copies each one it writes
    as it runs (Python writes every object it uses); the spare copies them ahead."""
    ex = copy_example(tmp_path / "ex", capsys)
    server = calls.up(ex.project)
    spare = _spare_of(server)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        dirty = _dirty_kb(spare)
        if dirty["Private_Dirty"] > 4 * dirty["Shared_Dirty"]:
            break
        time.sleep(0.05)
    assert dirty["Private_Dirty"] > 4 * dirty["Shared_Dirty"], dirty
    assert dirty["Private_Dirty"] > _dirty_kb(server)["Private_Dirty"] // 2, dirty
