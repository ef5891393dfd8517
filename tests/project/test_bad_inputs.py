"""Every bad input gives a clear error, the right exit code, and changes nothing on disk."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.projects import copy_example, scratch_fork, scratch_project, snapshot


def _diff_to(path: str) -> str:
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n"
        f"+++ b/{path}\n@@ -0,0 +1 @@\n+evil\n"
    )


UNSAFE = [
    ("abs", "/etc/passwd", "/etc/passwd"),
    ("dotdot", "vllm/../../outside.txt", "outside.txt"),
    ("dotgit", ".git/hooks/post-checkout", ".git/hooks/post-checkout"),
    ("nested-dotgit", "sub/.git/config", "sub/.git/config"),
]


@pytest.mark.parametrize(("name", "path", "shown"), UNSAFE, ids=[u[0] for u in UNSAFE])
def test_unsafe_paths_refused(tmp_path, capsys, name, path, shown):
    _fork, project, run = scratch_project(tmp_path, capsys, {"f.txt": "x\n"})
    bad = tmp_path / f"{name}.diff"
    bad.write_text(_diff_to(path))
    before = snapshot(project)
    code, _, err = run("import", str(bad), expect=None)
    assert code == 1, err
    assert shown in err and f"{name}.diff" in err and "Traceback" not in err
    assert snapshot(project) == before
    # The same file placed in patches/ by hand: status and apply refuse it, naming it.
    (project / "patches" / f"{name}.patch").write_text(_diff_to(path))
    series = project / "series.yaml"
    series.write_text(
        series.read_text().replace(
            "patches: []", f"patches:\n  - name: {name}\n    file: {name}.patch\n    summary: bad\n"
        )
    )
    before = snapshot(project)
    for cmd in ("status", "apply"):
        code, _, err = run(cmd, expect=None)
        assert code == 1, err
        assert shown in err and f"patches/{name}.patch" in err
    assert snapshot(project) == before
    assert not (tmp_path / "outside.txt").exists()


def test_write_through_symlinks_refused(tmp_path, capsys):
    fork, project, run = scratch_project(tmp_path, capsys, {"real/f.txt": "x\n"})
    # A symlink in the base tree.
    os.symlink("real", fork.path / "link")
    fork.commit("add a link")
    fork.tag("v2")
    series = project / "series.yaml"
    series.write_text(
        series.read_text()
        .replace("tag: v1", "tag: v2")
        .replace(fork.rev("v1^{commit}"), fork.rev("v2^{commit}"))
    )
    (tmp_path / "through.diff").write_text(_diff_to("link/g.txt"))
    before = snapshot(project)
    _, _, err = run("import", str(tmp_path / "through.diff"), expect=1)
    assert "link/g.txt" in err and "symlink 'link'" in err
    assert snapshot(project) == before
    # A symlink the series itself creates in an earlier patch, written through by a later one.
    (tmp_path / "mklink.diff").write_text(
        "diff --git a/dir b/dir\nnew file mode 120000\n--- /dev/null\n+++ b/dir\n"
        "@@ -0,0 +1 @@\n+/tmp\n\\ No newline at end of file\n"
    )
    run("import", str(tmp_path / "mklink.diff"))
    before = snapshot(project)
    (tmp_path / "use.diff").write_text(_diff_to("dir/escape.txt"))
    _, _, err = run("import", str(tmp_path / "use.diff"), expect=1)
    assert "dir/escape.txt" in err and "symlink 'dir'" in err
    assert snapshot(project) == before
    assert not os.path.exists("/tmp/escape.txt")


SERIES_ERRORS = [
    (
        "unknown key",
        "  - name: a\n    file: a.patch\n    sumary: x\n",
        ["series.yaml:", "unknown key 'sumary'", "did you mean 'summary'"],
    ),
    (
        "duplicate names",
        (
            "  - name: a\n    file: a.patch\n    summary: x\n"
            "  - name: a\n    file: b.patch\n    summary: y\n"
        ),
        ["series.yaml:", "duplicate patch name 'a'"],
    ),
    (
        "duplicate files",
        (
            "  - name: a\n    file: a.patch\n    summary: x\n"
            "  - name: b\n    file: a.patch\n    summary: y\n"
        ),
        ["series.yaml:", "already used"],
    ),
    (
        "missing file",
        "  - name: a\n    file: nothere.patch\n    summary: x\n",
        ["series.yaml:", "nothere.patch", "does not exist"],
    ),
    (
        "duplicate key",
        "  - name: a\n    file: a.patch\n    summary: x\n    summary: y\n",
        ["series.yaml:", "duplicate key 'summary'"],
    ),
    (
        "alias",
        "  - &p\n    name: a\n    file: a.patch\n    summary: x\n  - *p\n",
        ["series.yaml:", "anchors and aliases"],
    ),
    (
        "escaping file",
        "  - name: a\n    file: ../a.patch\n    summary: x\n",
        ["series.yaml:", "../a.patch"],
    ),
]


@pytest.mark.parametrize(
    ("what", "entries", "words"), SERIES_ERRORS, ids=[s[0] for s in SERIES_ERRORS]
)
def test_bad_series_yaml(tmp_path, capsys, what, entries, words):
    _fork, project, run = scratch_project(tmp_path, capsys, {"f.txt": "x\n"})
    (project / "patches" / "a.patch").write_text(_diff_to("new.txt"))
    series = project / "series.yaml"
    series.write_text(series.read_text().replace("patches: []", "patches:\n" + entries))
    line = next(
        i for i, ln in enumerate(series.read_text().splitlines(), 1) if ln.startswith("patches:")
    )
    before = snapshot(project)
    for cmd in ("status", "apply"):
        code, out, err = run(cmd, expect=None)
        assert code == 1, err
        for w in words:
            assert w in err, (w, err)
        # The line named is in the patches block.
        located = int(err.split("series.yaml:", 1)[1].split(":", 1)[0])
        assert located > line
        assert "Traceback" not in err and out == ""
    assert snapshot(project) == before
    assert not (project / ".forkpatch" / "worktree").exists()


def test_exit_codes_and_debug(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    ex.run("no-such-command", expect=2)
    ex.run("push", "--bogus", expect=2)
    _code, _, err = ex.run("push", expect=1)  # no work tree yet
    assert "no work tree" in err and "tip:" in err and "Traceback" not in err
    exe = [sys.executable, "-m", "forkpatch", "-C", str(ex.project)]
    proc = subprocess.run([*exe, "push"], capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    proc = subprocess.run([*exe, "--debug", "push"], capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" in proc.stderr
    # A conflict is exit code 3 (see the status and edit tests for more).
    missing = tmp_path / "nowhere"
    proc = subprocess.run(
        [sys.executable, "-m", "forkpatch", "-C", str(missing), "status"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and f"{missing} does not exist" in proc.stderr
    assert "-C" in proc.stderr
    # A directory without a project, and a file given as the directory.
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("")
    for where, words in (("empty", "no series.yaml"), ("file", "is a file")):
        proc = subprocess.run(
            [sys.executable, "-m", "forkpatch", "-C", str(tmp_path / where), "status"],
            capture_output=True,
            text=True,
        )
        assert proc.returncode in (1, 2) and words in proc.stderr, proc.stderr


def test_two_processes_cannot_interleave(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    lock = ex.project / ".forkpatch" / "lock"
    # A second process holds the project lock (as a running `forkpatch apply` would).
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time\n"
                "from pathlib import Path\n"
                "from forkpatch.fsutil import project_lock\n"
                "with project_lock(Path(sys.argv[1]), command='apply'):\n"
                "    print('locked', flush=True)\n"
                "    time.sleep(30)\n"
            ),
            str(lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        before = snapshot(ex.project)
        for cmd in (["apply"], ["import", str(ex.incoming[0])]):
            _code, _, err = ex.run(*cmd, expect=1)
            assert f"pid {holder.pid}" in err and "apply" in err, err
        assert snapshot(ex.project) == before
        assert not (ex.project / ".forkpatch" / "worktree").exists()
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.05)
    ex.run("apply")  # the lock goes with its process


def _unwritable() -> Path:
    """A directory nobody may create entries in, not even root (sysfs)."""
    probe = Path("/sys/forkpatch-probe")
    try:
        probe.mkdir()
    except OSError:
        return probe
    probe.rmdir()
    pytest.skip("/sys accepts new directories here")


@pytest.mark.parametrize("where", ["init", "rebase --report"])
def test_a_place_that_cannot_be_written_is_exit_1_naming_it_and_nothing_changes(
    tmp_path, capsys, where
):
    """Permissions, a read-only or full file system: the user's to fix (exit 1, the
    path and a tip), never "internal error" (exit 4); nothing was changed first."""
    target = _unwritable()
    if where == "init":
        fork = scratch_fork(tmp_path / "fork", {"a.txt": "a\n"}).path
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "forkpatch",
                "-C",
                str(target / "proj"),
                "init",
                "--fork-url",
                str(fork),
                "--base",
                "v1",
            ],
            capture_output=True,
            text=True,
        )
    else:
        ex = copy_example(tmp_path, capsys)
        before = snapshot(ex.project)
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "forkpatch",
                "-C",
                str(ex.project),
                "rebase",
                "--onto",
                "v1.3.0",
                "--report",
                str(target / "reports"),
            ],
            capture_output=True,
            text=True,
        )
        assert snapshot(ex.project) == before
        assert not (ex.project / ".forkpatch" / "rebase").exists()
    assert proc.returncode == 1, proc.stderr
    assert str(target) in proc.stderr and "tip:" in proc.stderr, proc.stderr
    assert "internal error" not in proc.stderr
