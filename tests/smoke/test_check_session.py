"""The smoke run's long-lived check processes (forkpatch.smoke.session).

The team's pytest checks fork from one server that imported the heavy modules once; a
check that crashes, hangs or leaves children behind is that check's failure alone, the
server goes on for the next, and a server that goes is started again. The built-in
check process is restarted after a check that ended it. Real processes throughout:
this interpreter stands in for the smoke environment (the checks need only pytest).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from forkpatch.proc import Deadline
from forkpatch.sections import TeamCheck
from forkpatch.smoke import incheck
from forkpatch.smoke.env import SmokeEnv
from forkpatch.smoke.session import run_incheck_resumed
from forkpatch.smoke.team import run_team_checks
from support.procs import alive

# A module whose import is slow and leaves a trace: imported once in the server, the
# checks find it imported already.
HEAVY = """import os, time
time.sleep(1.0)
with open(os.environ["HEAVY_LOG"], "a") as fh:
    fh.write(f"{os.getpid()}\\n")
STATE = []
"""

TESTS = """import os, signal, subprocess, sys, time
import heavy

def test_one():
    heavy.STATE.append(1)
    assert heavy.STATE == [1]  # nothing of another check's run is left here

def test_two():
    heavy.STATE.append(2)
    assert heavy.STATE == [2]

def test_where():
    assert os.getcwd() == os.environ["WANT_CWD"]
    assert os.getcwd() in sys.path[:2]  # as `python -m` puts it (pytest's rootdir before)
    assert os.environ["VIRTUAL_ENV"]
    import helper_beside  # beside the node id's file, as `python -m pytest` finds it
    print("WHERE-OK", os.getpid())

def test_fails():
    assert heavy.STATE == ["not this"], "the team's assertion message"

def test_segfault():
    os.kill(os.getpid(), signal.SIGSEGV)

def test_exits():
    os._exit(9)

def test_hangs():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    with open(os.environ["CHILD_PID"], "w") as fh:
        fh.write(str(child.pid))
    print("hanging now", flush=True)
    time.sleep(300)

def test_hangs_ignoring_term():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("ignoring SIGTERM", flush=True)
    time.sleep(300)

def test_leaves_a_child():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    with open(os.environ["CHILD_PID"], "w") as fh:
        fh.write(str(child.pid))

def test_kills_the_server():
    import json
    with open(os.environ["SERVER_START"]) as fh:
        pid = json.loads(fh.read().strip().splitlines()[-1])["pid"]
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return  # run again on its own: the server is gone already
    time.sleep(300)
"""


def _gone(pid: int, within: float = 5.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end and alive(pid):
        time.sleep(0.05)
    return not alive(pid)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "project"
    (root / "team").mkdir(parents=True)
    (root / "team" / "test_ours.py").write_text(TESTS, encoding="utf-8")
    (root / "team" / "helper_beside.py").write_text("", encoding="utf-8")
    monkeypatch.setenv("HEAVY_LOG", str(tmp_path / "heavy.log"))
    monkeypatch.setenv("WANT_CWD", str(root))
    monkeypatch.setenv("CHILD_PID", str(tmp_path / "child.pid"))
    monkeypatch.setenv("SERVER_START", str(tmp_path / "env" / "team-server" / "start.log"))
    return root


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A smoke-like environment: a venv seeing this interpreter's packages (pytest) and
    a directory holding heavy.py's installed copy (as the wheel's vllm is installed)."""
    import site
    import subprocess

    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    lib = root / "lib"
    lib.mkdir()
    (lib / "heavy.py").write_text(HEAVY, encoding="utf-8")
    purelib = next((root / "venv" / "lib").glob("python*/site-packages"))
    paths = [*site.getsitepackages(), str(lib)]
    (purelib / "zz-test.pth").write_text("\n".join(paths) + "\n", encoding="utf-8")
    return root / "venv"


def _senv(tmp_path: Path, venv: Path) -> SmokeEnv:
    # The run's files (team-server/, team-logs/) go beside a venv of the test's own path.
    here = tmp_path / "env" / "venv"
    here.parent.mkdir(parents=True, exist_ok=True)
    if not here.exists():
        here.symlink_to(venv)
    return SmokeEnv(here, here / "bin" / "python", "system", sys.executable, True, None)


def _run(tmp_path: Path, root: Path, *, names: list[str], **kw):
    venv = kw.pop("venv")
    checks = {
        f"static.{n.replace('_', '-')}": TeamCheck(
            pytest=f"team/test_ours.py::test_{n}", timeout=kw.pop(f"timeout_{n}", None)
        )
        for n in names
    }
    return run_team_checks(
        checks,
        _senv(tmp_path, venv),
        {},
        device={},
        root=root,
        fork_tests=lambda: root,
        deadline=kw.pop("deadline", None),
        preimport=kw.pop("preimport", ("heavy",)),
    )


def _imports(tmp_path: Path) -> int:
    log = tmp_path / "heavy.log"
    return len(log.read_text(encoding="utf-8").split()) if log.is_file() else 0


def test_the_checks_share_one_import_and_nothing_else(
    tmp_path: Path, project: Path, venv: Path
) -> None:
    got = _run(tmp_path, project, venv=venv, names=["one", "two", "where", "fails"])
    assert {k: r.outcome for k, r in got.items()} == {
        "static.one": "passed",
        "static.two": "passed",
        "static.where": "passed",
        "static.fails": "failed",
    }, {k: r.detail for k, r in got.items()}
    assert "the team's assertion message" in got["static.fails"].detail
    assert _imports(tmp_path) == 1  # heavy imported once, in the server, for all four


def test_without_the_server_each_check_imports_again(
    tmp_path: Path, project: Path, venv: Path
) -> None:
    """The control: with nothing preimported each check pays the import itself."""
    got = _run(tmp_path, project, venv=venv, names=["one", "two"], preimport=())
    assert [r.outcome for r in got.values()] == ["passed", "passed"]
    assert _imports(tmp_path) == 2


@pytest.mark.parametrize(
    ("name", "says"), [("segfault", "killed by SIGSEGV"), ("exits", "exit status 9")]
)
def test_a_check_that_crashes_fails_alone(
    tmp_path: Path, project: Path, venv: Path, name: str, says: str
) -> None:
    got = _run(tmp_path, project, venv=venv, names=["one", name, "two"])
    crashed = got[f"static.{name}"]
    assert crashed.outcome == "failed" and says in crashed.detail, crashed.detail
    assert got["static.one"].outcome == got["static.two"].outcome == "passed"
    assert _imports(tmp_path) == 1  # the server survived it: no second import


@pytest.mark.parametrize("name", ["hangs", "hangs_ignoring_term"])
def test_a_check_that_hangs_is_ended_at_its_timeout_with_its_children(
    tmp_path: Path, project: Path, venv: Path, name: str
) -> None:
    t0 = time.monotonic()
    got = _run(tmp_path, project, venv=venv, names=[name, "two"], **{f"timeout_{name}": 3})
    hung = got[f"static.{name.replace('_', '-')}"]
    assert hung.outcome == "failed" and "timed out after 3 s (its timeout)" in hung.detail
    assert got["static.two"].outcome == "passed"
    assert time.monotonic() - t0 < 30
    if name == "hangs":
        assert _gone(int((tmp_path / "child.pid").read_text()))


def test_the_run_deadline_ends_a_check_through_the_server(
    tmp_path: Path, project: Path, venv: Path
) -> None:
    t0 = time.monotonic()
    got = _run(tmp_path, project, venv=venv, names=["hangs", "two"], deadline=Deadline(6.0))
    assert got["static.hangs"].outcome == "failed"
    assert "the smoke run's --timeout (6 s)" in got["static.hangs"].detail
    assert got["static.two"].outcome == "not-run"
    assert time.monotonic() - t0 < 30
    assert _gone(int((tmp_path / "child.pid").read_text()))


def test_children_a_passing_check_leaves_are_ended(
    tmp_path: Path, project: Path, venv: Path
) -> None:
    got = _run(tmp_path, project, venv=venv, names=["leaves_a_child", "one"])
    assert [r.outcome for r in got.values()] == ["passed", "passed"]
    assert _gone(int((tmp_path / "child.pid").read_text()))


def test_a_server_that_goes_is_started_again(tmp_path: Path, project: Path, venv: Path) -> None:
    """A check under which the server is killed runs again on its own (and passes: it
    was not the check's doing); the next check gets a fresh server; none passes
    silently without having run."""
    got = _run(tmp_path, project, venv=venv, names=["one", "kills_the_server", "two"])
    assert [r.outcome for r in got.values()] == ["passed"] * 3, {
        k: r.detail for k, r in got.items()
    }
    # the first server, the check run on its own, the second server
    assert _imports(tmp_path) == 3


# --------------------------------------------------------------------------- built-in checks


def _records(ids: list[str], crash_at: str | None) -> list[dict]:
    out: list[dict] = [{"kind": "env", "python": "3"}]
    for cid in ids:
        out.append({"kind": "start", "id": cid})
        if cid == crash_at:
            return out
        out.append({"kind": "check", "id": cid, "outcome": "passed", "detail": "ok"})
    return out


@pytest.mark.parametrize("crash_at", [0, 1, 3])
def test_the_check_process_is_restarted_after_a_check_that_ended_it(crash_at: int) -> None:
    ids = ["static.a", "static.b", "static.c", "static.d"]
    calls: list[list[str]] = []

    def run_once(left):
        calls.append(list(left))
        first = calls[0] == list(left) and len(calls) == 1
        return _records(list(left), ids[crash_at] if first else None), (
            "killed by SIGSEGV" if first else "exited normally"
        )

    records, _note = run_incheck_resumed(ids, run_once, deadline=Deadline(None))
    results = {r["id"]: r for r in records if r["kind"] == "check"}
    assert set(results) == set(ids)
    crashed = results[ids[crash_at]]
    assert crashed["outcome"] == incheck.FAILED and "killed by SIGSEGV" in crashed["detail"]
    assert all(results[c]["outcome"] == "passed" for c in ids if c != ids[crash_at])
    assert calls[1:] == ([ids[crash_at + 1 :]] if crash_at + 1 < len(ids) else [])
    assert sum(1 for r in records if r["kind"] == "env") == 1


def test_past_the_deadline_the_rest_are_not_restarted() -> None:
    ids = ["static.a", "static.b"]
    calls = []

    def run_once(left):
        calls.append(left)
        return _records(list(left), "static.a"), "timed out"

    deadline = Deadline(0.0)
    records, _ = run_incheck_resumed(ids, run_once, deadline=deadline)
    assert len(calls) == 1
    assert [r["id"] for r in records if r["kind"] == "check"] == ["static.a"]


def test_the_server_is_gone_after_the_run(tmp_path: Path, project: Path, venv: Path) -> None:
    import json

    _run(tmp_path, project, venv=venv, names=["one"])
    start = tmp_path / "env" / "team-server" / "start.log"
    pid = int(json.loads(start.read_text(encoding="utf-8").strip().splitlines()[-1])["pid"])
    assert _gone(pid)


CRASH_ON_IMPORT = """A module that {what} the interpreter that imports it (a test).

diff --git a/vllm/crashy.py b/vllm/crashy.py
--- /dev/null
+++ b/vllm/crashy.py
@@ -0,0 +1,2 @@
+import os, signal, time
+{code}
"""
CRASHES = {
    "segfault": ("crashes", "os.kill(os.getpid(), signal.SIGSEGV)", "killed by SIGSEGV"),
    "hang": ("hangs", "time.sleep(600)", "ran past its own limit of 8 s"),
}


@pytest.mark.slow
@pytest.mark.parametrize("crash", sorted(CRASHES))
def test_a_built_in_check_that_crashes_fails_alone_and_the_rest_run(
    example_build,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    crash: str,
) -> None:
    """static.import-patched-modules imports a patched module that segfaults or hangs:
    that check fails, saying how the process ended, and the checks after it run in a
    fresh check process (before: each was an error, "ended before it ran", and a hang
    took the whole --timeout)."""
    import json
    from dataclasses import replace

    from forkpatch.project import Project
    from forkpatch.series import PatchEntry, load_series, save_series
    from forkpatch.smoke import session
    from forkpatch.wheels.buildwheel import BuildOptions, build_wheel
    from support import smoke
    from support.cli import Runner

    project = smoke.copy_project(example_build, tmp_path / "project")
    what, code, says = CRASHES[crash]
    text = CRASH_ON_IMPORT.format(what=what, code=code)
    (project / "patches" / "crashy.patch").write_text(text, encoding="utf-8")
    monkeypatch.setattr(session, "CHECK_TIMEOUT_S", 8.0)
    series = load_series(project / "series.yaml")
    entry = PatchEntry(name="crashy", file="crashy.patch", summary="crash on import")
    patches = [replace(p, smoke=()) for p in series.patches] + [entry]
    save_series(series.with_patches(patches), project / "series.yaml")
    opts = BuildOptions(
        mode="overlay", base_wheel=example_build.base_wheel, out_dir=tmp_path / "dist"
    )
    wheel = build_wheel(Project(project), opts).wheels[0]
    run = Runner(project, capsys)
    _code, out, _err = run("smoke", str(wheel), "--tier", "static", "--json", expect=1)
    got = {c["id"]: c for c in json.loads(out)["checks"]}
    crashed = got["static.import-patched-modules"]
    assert crashed["outcome"] == "failed", crashed
    assert says in crashed["detail"], crashed
    after = ["static.provenance", "static.installed-from-wheel", "static.version-metadata"]
    assert all(got[c]["outcome"] in ("passed", "not-run") for c in after), got
    assert got["static.provenance"]["outcome"] == "passed"
