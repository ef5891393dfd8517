"""Every bad input -> BuildError with a message naming the file, and out_dir untouched."""

from __future__ import annotations

import re
import shutil
import zipfile
from pathlib import Path

import pytest

from forkpatch.errors import BuildError
from forkpatch.wheels.identity import Provenance
from forkpatch.wheels.overlay import overlay_wheel
from forkpatch.wheels.verify import matches_series, verify_wheel
from forkpatch.wheels.wheelzip import WheelZip
from support import wheelfactory

NEW = "1.2.1+fp.abcdef0123"


def run(base: Path, out_dir: Path, provenance: Provenance, **kw: object) -> None:
    sentinel = out_dir / "keep.txt"
    sentinel.write_text("x")
    args: dict[str, object] = {
        "replacements": {},
        "new_version": NEW,
        "provenance": provenance,
        "out_dir": out_dir,
    }
    args.update(kw)
    try:
        overlay_wheel(base, **args)  # type: ignore[arg-type]
    finally:
        assert sorted(p.name for p in out_dir.iterdir()) == ["keep.txt"]


def corrupt_member(wheel: Path, name: str) -> None:
    with WheelZip(wheel) as wz:
        e = wz.by_name[name]
    data = bytearray(wheel.read_bytes())
    data[e.data_offset] ^= 0xFF
    wheel.write_bytes(bytes(data))


def test_not_a_zip(tmp_path: Path, out_dir: Path, provenance: Provenance) -> None:
    bad = tmp_path / "1cat_vllm-1.2.1-py3-none-any.whl"
    bad.write_bytes(b"this is not a zip file" * 10)
    with pytest.raises(BuildError, match=r"1cat_vllm-1\.2\.1-py3-none-any\.whl.*not a zip") as ei:
        run(bad, out_dir, provenance)
    assert ei.value.tip


def test_truncated(base_wheel: Path, out_dir: Path, provenance: Provenance) -> None:
    base_wheel.write_bytes(base_wheel.read_bytes()[:-100])
    with pytest.raises(BuildError, match=re.escape(base_wheel.name)):
        run(base_wheel, out_dir, provenance)


def test_bad_crc_in_member_we_read(base_wheel: Path, out_dir: Path, provenance: Provenance) -> None:
    corrupt_member(base_wheel, "vllm/_version.py")
    with pytest.raises(BuildError, match=re.escape("vllm/_version.py")):
        run(base_wheel, out_dir, provenance)


def test_bad_crc_metadata(base_wheel: Path, out_dir: Path, provenance: Provenance) -> None:
    corrupt_member(base_wheel, "1cat_vllm-1.2.1.dist-info/METADATA")
    with pytest.raises(BuildError, match="METADATA"):
        run(base_wheel, out_dir, provenance)


def test_version_mismatch(base_wheel: Path, out_dir: Path, provenance: Provenance) -> None:
    with pytest.raises(
        BuildError,
        match=re.escape("is the fork's 1.2.1, but the series being built is on the fork's 1.3.0"),
    ) as ei:
        run(base_wheel, out_dir, provenance, expected_fork_version="1.3.0")
    assert "1.3.0 wheel" in str(ei.value.tip)


@pytest.mark.parametrize(
    "path",
    [
        "../evil.py",
        "/abs.py",
        "vllm/../../x.py",
        "vllm/./x.py",
        "C:/x.py",
        "vllm\\x.py",
        "",
        "vllm//x.py",
        "vllm/",
    ],
)
def test_escaping_paths(base_wheel: Path, out_dir: Path, provenance: Provenance, path: str) -> None:
    with pytest.raises(BuildError, match="not a safe relative path"):
        run(base_wheel, out_dir, provenance, replacements={path: b"x"})


@pytest.mark.parametrize("path", ["1cat_vllm-1.2.1.dist-info/METADATA", "x-1.0.dist-info/RECORD"])
def test_dist_info_target(
    base_wheel: Path, out_dir: Path, provenance: Provenance, path: str
) -> None:
    with pytest.raises(BuildError, match=re.escape("targets the wheel's .dist-info")):
        run(base_wheel, out_dir, provenance, replacements={path: b"x"})


def test_missing_record(tmp_path: Path, out_dir: Path, provenance: Provenance) -> None:
    base = wheelfactory.build_wheel(tmp_path, wheelfactory.base_files(), with_record=False)
    with pytest.raises(BuildError, match=re.escape("has no 1cat_vllm-1.2.1.dist-info/RECORD")):
        run(base, out_dir, provenance)


def test_delete_absent(base_wheel: Path, out_dir: Path, provenance: Provenance) -> None:
    with pytest.raises(BuildError, match=re.escape("deletes vllm/nope.py")):
        run(base_wheel, out_dir, provenance, replacements={"vllm/nope.py": None})


def test_bad_new_version(base_wheel: Path, out_dir: Path, provenance: Provenance) -> None:
    with pytest.raises(BuildError, match="normal form"):
        run(base_wheel, out_dir, provenance, new_version="1.2.1+FP-x")
    with pytest.raises(BuildError, match="not PEP 440"):
        run(base_wheel, out_dir, provenance, new_version="banana")


def test_renamed_wheel_file(
    base_wheel: Path, tmp_path: Path, out_dir: Path, provenance: Provenance
) -> None:
    renamed = tmp_path / "1cat_vllm-1.2.2-py3-none-any.whl"
    shutil.copy(base_wheel, renamed)
    with pytest.raises(BuildError, match=re.escape("METADATA says version 1.2.1")):
        run(renamed, out_dir, provenance)


def test_error_during_write_leaves_nothing(
    base_wheel: Path, out_dir: Path, provenance: Provenance
) -> None:
    def boom(members: object) -> None:
        raise BuildError("step failed")

    with pytest.raises(BuildError, match="step failed"):
        run(base_wheel, out_dir, provenance, extra_steps=[boom])


def test_verify_reports_tampering(base_wheel: Path, tmp_path: Path, provenance: Provenance) -> None:
    out_dir = tmp_path / "o"
    out_dir.mkdir()
    good = overlay_wheel(
        base_wheel, replacements={}, new_version=NEW, provenance=provenance, out_dir=out_dir
    )
    # rewrite one member's content and add an unlisted one, with valid zip CRCs
    bad = tmp_path / good.name
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "vllm/__init__.py":
                data += b"# tampered\n"
            if info.filename.endswith("/top_level.txt"):
                continue
            dst.writestr(info, data)
        dst.writestr("vllm/extra.py", b"")
    report = verify_wheel(bad)
    assert not report.ok
    assert [m.split(":")[0] for m in report.mismatches] == ["vllm/__init__.py"]
    assert report.missing == [f"1cat_vllm-{NEW}.dist-info/top_level.txt"]
    assert report.extra == ["vllm/extra.py"]
    other = Provenance.from_json(provenance.to_json().replace("v1.2.1", "v1.3.0"))
    diffs = matches_series(report, other)
    assert "tag: wheel has 'v1.2.1', series expects 'v1.3.0'" in diffs
    assert any("fails verification" in d for d in diffs)
