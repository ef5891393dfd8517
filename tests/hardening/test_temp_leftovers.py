"""A killed writer's temporary file is removed by the next locked command, even in
.forkpatch/, where commands that take no lock write caches too (series.yaml's kept
parse, status's answer, the patch-id cache): there a young temporary file is kept for
a minute unless the writer its name carries (``.pid<N>.``) has ended."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from forkpatch.fsutil import sweep_temps, write_temp
from support.cli import fp_in
from support.projects import project_with_patches
from support.reliability import Row

FILES = {"a.txt": "one\ntwo\nthree\n"}
PATCHES = [("p1", "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n")]


def _ended_pid() -> int:
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(proc.stdout)


def test_a_temp_file_names_its_writer(tmp_path: Path) -> None:
    tmp = write_temp(tmp_path / "state.json", b"{}")
    assert tmp is not None
    assert f".state.json.pid{os.getpid()}." in Path(tmp).name


@pytest.mark.parametrize("name", ["series-parsed.json", "status.json", "cache.v2.json"])
def test_a_young_leftover_of_an_ended_writer_goes_at_once(tmp_path: Path, name: str) -> None:
    project, _fork = project_with_patches(tmp_path, FILES, PATCHES)
    state = project / ".forkpatch"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        gone = state / f".{name}.pid{_ended_pid()}.abc123_x.forkpatch-tmp"
        running = state / f".{name}.pid{sleeper.pid}.abc123_y.forkpatch-tmp"
        ours = state / f".{name}.pid{os.getpid()}.abc123_z.forkpatch-tmp"
        unnamed = state / f".{name}.abc123_w.forkpatch-tmp"
        for p in (gone, running, ours, unnamed):
            p.write_text("half written\n")
        code, _, err = fp_in(project, "apply")
        assert code == 0, err
        assert not gone.exists()
        # Writers that may still be at work, and a young file that names none, stay.
        assert running.exists() and ours.exists() and unnamed.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert sweep_temps(state, older_than=60.0) == [running]


def test_an_old_leftover_goes_whoever_wrote_it(tmp_path: Path) -> None:
    leftover = tmp_path / f".x.json.pid{os.getpid()}.abc123_q.forkpatch-tmp"
    leftover.write_text("old\n")
    os.utime(leftover, (1, 1))
    assert sweep_temps(tmp_path, older_than=60.0) == [leftover]


RELIABILITY = [
    Row(
        "interruptions",
        "a killed writer's temporary file in .forkpatch/, where commands without the lock "
        "write caches too (series.yaml's kept parse, status's answer, the patch-id cache)",
        "3 names x 4 writers (ended, running, this process, unnamed) + 1 old",
        "the next locked command removes the ended writer's file at once, whatever its "
        "age; a running writer's and a young unnamed one stay a minute",
    ),
]
