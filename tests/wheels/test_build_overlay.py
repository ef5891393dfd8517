from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import zipfile
from pathlib import Path

import pytest

from forkpatch.wheels.dist_alias import add_vllm_dist_alias
from forkpatch.wheels.identity import Provenance
from forkpatch.wheels.overlay import (
    compiled_paths_touched,
    overlay_wheel,
    record_hash,
    rewrite_version_file,
    tree_path_to_wheel_path,
)
from forkpatch.wheels.verify import matches_series, verify_wheel
from forkpatch.wheels.wheelzip import WheelZip
from support import wheelfactory
from support.venvs import pip_wheel

NEW = "1.2.1+fp.abcdef0123"
DI = f"1cat_vllm-{NEW}.dist-info"
REPL: dict[str, bytes | None] = {
    "vllm/model_executor/layers/fp8.py": b"def apply(x):\n    return x * 2\n",
    "vllm/utils/deep_gemm.py": None,
    "vllm/model_executor/layers/sm70.py": b"PADDED = True\n",
}


def raw_members(path: Path) -> dict[str, bytes]:
    with WheelZip(path) as wz:
        return {e.name: wz.raw_data(e) for e in wz.entries}


def test_overlay_contents(base_wheel: Path, out_dir: Path, provenance: Provenance) -> None:
    out = overlay_wheel(
        base_wheel,
        replacements=REPL,
        new_version=NEW,
        provenance=provenance,
        out_dir=out_dir,
        expected_fork_version="1.2.1",
    )
    assert out.name == f"1cat_vllm-{NEW}-py3-none-any.whl"
    assert list(out_dir.iterdir()) == [out]
    with zipfile.ZipFile(out) as zf:
        assert zf.testzip() is None
        names = zf.namelist()
        assert (
            zf.read("vllm/model_executor/layers/fp8.py")
            == REPL["vllm/model_executor/layers/fp8.py"]
        )
        assert zf.read("vllm/model_executor/layers/sm70.py") == b"PADDED = True\n"
        assert "vllm/utils/deep_gemm.py" not in names
        assert not any(n.startswith("1cat_vllm-1.2.1.dist-info/") for n in names)
        assert names[-1] == f"{DI}/RECORD"
        assert names[-2] == f"{DI}/forkpatch-provenance.json"
        meta = zf.read(f"{DI}/METADATA").decode()
        assert f"\nVersion: {NEW}\n" in meta and "A test wheel." in meta
        version_py = zf.read("vllm/_version.py").decode()
        assert f"__version__ = version = '{NEW}'" in version_py
        assert "__version_tuple__ = version_tuple = (1, 2, 1, 'fp.abcdef0123')" in version_py
        assert "VERSION_TUPLE = Tuple[Union[int, str], ...]" in version_py  # rest kept
        got = Provenance.from_json(zf.read(f"{DI}/forkpatch-provenance.json"))
        # The build adds what it wrote: the hash of every file the series changed (None:
        # deleted) and a digest of the other members.
        assert dataclasses.replace(got, files=None, members_sha256=None) == provenance
        assert got.files == {
            path: hashlib.sha256(zf.read(path)).hexdigest() if data is not None else None
            for path, data in REPL.items()
        }
        assert got.members_sha256 is not None
        record = list(csv.reader(io.StringIO(zf.read(f"{DI}/RECORD").decode())))
        listed = {r[0]: r for r in record}
        assert listed[f"{DI}/RECORD"] == [f"{DI}/RECORD", "", ""]
        prov = zf.read(f"{DI}/forkpatch-provenance.json")
        assert listed[f"{DI}/forkpatch-provenance.json"][1:] == [record_hash(prov), str(len(prov))]
        assert set(listed) == set(names)
    # untouched members: the very same compressed bytes (renamed dist-info files too)
    before, after = raw_members(base_wheel), raw_members(out)
    for name in ("vllm/__init__.py", "vllm/_C.abi3.so", "vllm/entrypoints/cli/main.py"):
        assert after[name] == before[name]
    assert after[f"{DI}/WHEEL"] == before["1cat_vllm-1.2.1.dist-info/WHEEL"]
    report = verify_wheel(out)
    assert report.ok, report.problems()
    assert report.version == NEW and report.provenance is not None
    assert dataclasses.replace(report.provenance, files=None, members_sha256=None) == provenance
    assert matches_series(report, provenance) == []


def test_member_order_is_base_order(
    base_wheel: Path, out_dir: Path, provenance: Provenance
) -> None:
    out = overlay_wheel(
        base_wheel,
        replacements=REPL,
        new_version=NEW,
        provenance=provenance,
        out_dir=out_dir,
        extra_steps=[add_vllm_dist_alias],
    )
    base_names = zipfile.ZipFile(base_wheel).namelist()
    names = zipfile.ZipFile(out).namelist()
    kept = [
        n.replace("1cat_vllm-1.2.1.dist-info", DI)
        for n in base_names
        if n != "vllm/utils/deep_gemm.py" and not n.endswith("/RECORD")
    ]
    assert names[: len(kept)] == kept
    assert names[len(kept) :] == [
        "vllm/model_executor/layers/sm70.py",
        "_1cat_vllm_dist_alias.py",
        "1cat_vllm_dist_alias.pth",
        f"{DI}/forkpatch-provenance.json",
        f"{DI}/RECORD",
    ]


def test_deterministic(
    base_wheel: Path, tmp_path: Path, provenance: Provenance, monkeypatch: pytest.MonkeyPatch
) -> None:
    outs = []
    for i in range(2):
        d = tmp_path / f"o{i}"
        d.mkdir()
        outs.append(
            overlay_wheel(
                base_wheel,
                replacements=dict(reversed(REPL.items())) if i else REPL,
                new_version=NEW,
                provenance=provenance,
                out_dir=d,
                extra_steps=[add_vllm_dist_alias],
            )
        )
    assert outs[0].read_bytes() == outs[1].read_bytes()
    with zipfile.ZipFile(outs[0]) as zf:
        assert zf.getinfo("vllm/model_executor/layers/sm70.py").date_time == (1980, 1, 1, 0, 0, 0)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1750680000")  # 2025-06-23 12:00 UTC
    d = tmp_path / "sde"
    d.mkdir()
    out = overlay_wheel(
        base_wheel, replacements=REPL, new_version=NEW, provenance=provenance, out_dir=d
    )
    with zipfile.ZipFile(out) as zf:
        assert zf.getinfo("vllm/model_executor/layers/sm70.py").date_time == (2025, 6, 23, 12, 0, 0)


def test_same_version_and_identical_replacement(
    base_wheel: Path, out_dir: Path, provenance: Provenance
) -> None:
    """Rebuilding at the base version keeps the dist-info raw; identical bytes are not rewritten."""
    fp8 = zipfile.ZipFile(base_wheel).read("vllm/model_executor/layers/fp8.py")
    out = overlay_wheel(
        base_wheel,
        replacements={"vllm/model_executor/layers/fp8.py": fp8},
        new_version="1.2.1",
        provenance=provenance,
        out_dir=out_dir,
    )
    before, after = raw_members(base_wheel), raw_members(out)
    assert after["vllm/model_executor/layers/fp8.py"] == before["vllm/model_executor/layers/fp8.py"]
    assert verify_wheel(out).ok


def test_local_version_base(tmp_path: Path, out_dir: Path, provenance: Provenance) -> None:
    base = wheelfactory.build_wheel(
        tmp_path,
        wheelfactory.base_files("1.2.1+cu128"),
        version="1.2.1+cu128",
        tag="cp311-cp311-linux_x86_64",
    )
    new = "1.2.1+cu128.fp.abcdef0123"
    out = overlay_wheel(
        base,
        replacements={},
        new_version=new,
        provenance=provenance,
        out_dir=out_dir,
        expected_fork_version="1.2.1+cu128",
    )
    assert out.name == f"1cat_vllm-{new}-cp311-cp311-linux_x86_64.whl"
    text = zipfile.ZipFile(out).read("vllm/_version.py").decode()
    assert "(1, 2, 1, 'cu128.fp.abcdef0123')" in text


_SCM_STYLES = [
    # (old _version.py, expected after rewriting to 1.3.0+fp.ab)
    (
        (
            '__version__ = "1.2.1"\nversion = __version__\n__version_tuple__ = (1, 2, 1)\n'
            "version_tuple = __version_tuple__\n"
        ),
        (
            '__version__ = "1.3.0+fp.ab"\nversion = __version__\n'
            '__version_tuple__ = (1, 3, 0, "fp.ab")\nversion_tuple = __version_tuple__\n'
        ),
    ),
    (
        (
            "__version__ = version = '1.2.1'  # keep\n__version_tuple__ = version_tuple = (1, 2, 1)\n"
            "__commit_id__ = commit_id = 'g1234'\n"
        ),
        (
            "__version__ = version = '1.3.0+fp.ab'  # keep\n"
            "__version_tuple__ = version_tuple = (1, 3, 0, 'fp.ab')\n"
            "__commit_id__ = commit_id = 'g1234'\n"
        ),
    ),
    ("version: str = '1.2.1'\n", "version: str = '1.3.0+fp.ab'\n"),
    (
        (
            "__all__ = [\"__version__\"]\n__version__ = version = '1.2.1'\n"
            "__version_tuple__ = version_tuple = (1, 2, 1)\n"
        ),
        (
            "__all__ = [\"__version__\"]\n__version__ = version = '1.3.0+fp.ab'\n"
            "__version_tuple__ = version_tuple = (1, 3, 0, 'fp.ab')\n"
        ),
    ),
]


@pytest.mark.parametrize(("src", "want"), _SCM_STYLES)
def test_rewrite_version_file_styles(src: str, want: str) -> None:
    assert rewrite_version_file(src.encode(), "1.3.0+fp.ab", path="x").decode() == want


def test_compiled_paths_touched() -> None:
    paths = [
        "vllm/model_executor/layers/fp8.py",
        "csrc/quantization/fp8/sm70.cu",
        "CMakeLists.txt",
        "vllm/attention/ops/x.cuh",
        "setup.py",
        "requirements/cuda.txt",
        "tests/test_x.py",
        "flash-attention-v100/setup.py",
        "kernel.cu",
        "docs/setup.py",
        "vllm/ext.pyx",
        "vllm/setup.py.md",
    ]
    assert compiled_paths_touched(paths) == [
        "csrc/quantization/fp8/sm70.cu",
        "CMakeLists.txt",
        "vllm/attention/ops/x.cuh",
        "setup.py",
        "requirements/cuda.txt",
        "flash-attention-v100/setup.py",
        "kernel.cu",
        "vllm/ext.pyx",
    ]
    assert compiled_paths_touched(["vllm/a.py"], ["vllm/*.py"]) == ["vllm/a.py"]
    assert compiled_paths_touched(["vllm/sub/a.py"], ["vllm/*.py"]) == []


def test_tree_path_to_wheel_path() -> None:
    assert tree_path_to_wheel_path("vllm/x.py") == "vllm/x.py"
    assert tree_path_to_wheel_path("tests/test_x.py") is None
    assert tree_path_to_wheel_path("docs/index.md") is None
    assert tree_path_to_wheel_path("benchmarks/b.py") is None
    assert tree_path_to_wheel_path("vllm_plugin/x.py") is None
    assert tree_path_to_wheel_path("../vllm/x.py") is None
    assert tree_path_to_wheel_path("x/y.py", packages=("x",)) == "x/y.py"


def test_setuptools_built_base(tmp_path: Path, out_dir: Path, provenance: Provenance) -> None:
    """A base wheel made by a real backend (setuptools via pip wheel), not our factory."""
    proj = tmp_path / "proj"
    for name, data in wheelfactory.base_files().items():
        if name.endswith(".so"):
            continue
        (proj / name).parent.mkdir(parents=True, exist_ok=True)
        (proj / name).write_bytes(data)
    (proj / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "1cat-vllm"\nversion = "1.2.1"\n'
        '[tool.setuptools.packages.find]\ninclude = ["vllm*"]\n'
    )
    base = pip_wheel(proj, tmp_path / "wheels")
    out = overlay_wheel(
        base,
        replacements=REPL,
        new_version=NEW,
        provenance=provenance,
        out_dir=out_dir,
        extra_steps=[add_vllm_dist_alias],
        expected_fork_version="1.2.1",
    )
    assert verify_wheel(out).ok, verify_wheel(out).problems()
    assert (
        f"__version__ = version = '{NEW}'" in zipfile.ZipFile(out).read("vllm/_version.py").decode()
    )
