"""A wheel of the fork's real size (~80 MB, ~2,500 members)."""

from __future__ import annotations

import time
import zipfile
from pathlib import Path

import pytest

from forkpatch.wheels.dist_alias import add_vllm_dist_alias
from forkpatch.wheels.identity import Provenance
from forkpatch.wheels.overlay import overlay_wheel
from forkpatch.wheels.verify import verify_wheel
from forkpatch.wheels.wheelzip import WheelZip

NEW = "1.2.1+fp.abcdef0123"
CHANGED = ("vllm/pkg00/mod0000.py", "vllm/pkg01/mod0001.py", "vllm/pkg02/mod0002.py")


@pytest.mark.slow
def test_realistic_overlay(realistic_wheel: Path, tmp_path: Path, provenance: Provenance) -> None:
    assert realistic_wheel.stat().st_size > 70_000_000
    repl = {p: f"# patched {p}\n".encode() for p in CHANGED}
    outs = []
    for i in range(2):
        d = tmp_path / f"o{i}"
        d.mkdir()
        t0 = time.perf_counter()
        outs.append(
            overlay_wheel(
                realistic_wheel,
                replacements=repl,
                new_version=NEW,
                provenance=provenance,
                out_dir=d,
                extra_steps=[add_vllm_dist_alias],
            )
        )
        elapsed = time.perf_counter() - t0
        assert elapsed < 10, f"overlay of an 80 MB wheel took {elapsed:.1f}s"
    assert outs[0].read_bytes() == outs[1].read_bytes()

    with WheelZip(realistic_wheel) as a, WheelZip(outs[0]) as b:
        assert len(a.entries) > 2400
        renamed = {
            e.name.replace("1cat_vllm-1.2.1.dist-info", f"1cat_vllm-{NEW}.dist-info"): e
            for e in a.entries
        }
        same = 0
        for e in b.entries:
            old = renamed.get(e.name)
            if (
                old is None
                or e.name in CHANGED
                or e.name.endswith(("METADATA", "RECORD", "_version.py"))
            ):
                continue
            assert b.raw_data(e) == a.raw_data(old), e.name
            same += 1
        assert same == len(a.entries) - len(CHANGED) - 3
    with zipfile.ZipFile(outs[0]) as zf:
        for p in CHANGED:
            assert zf.read(p) == repl[p]
    report = verify_wheel(outs[0])
    assert report.ok, report.problems()[:5]
