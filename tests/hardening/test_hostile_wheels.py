"""Hostile wheels: zip-slip member names and zip bombs, in every wheel forkpatch reads.

Issue 12, items 11-12. Each hostile wheel goes through the commands that read a wheel:
``verify`` (every member, streamed), ``publish`` (the wheel's identity: METADATA and
provenance) and ``build-wheel --mode overlay`` (the base wheel). Each must refuse it with
a message naming the wheel (and the member), never write outside, never crash, and, for
bombs, finish in bounded time and memory: the command runs under an address-space limit
of 768 MiB, so inflating a bomb in memory dies with MemoryError.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from forkpatch.example import build_release_wheel, make_fork, write_example_patches
from support.cli import env, fp_in
from support.git import tree_state
from support.reliability import Row
from support.smoke import passing_report
from support.wheelfactory import GOOD_PROVENANCE, deflate_zeros, make_wheel, raw_zip

WHEEL = "1cat_vllm-1.2.1-py3-none-any.whl"
DI = "1cat_vllm-1.2.1.dist-info"
MEMORY_LIMIT = 768 << 20
GOOD_META = b"Metadata-Version: 2.1\nName: 1cat-vllm\nVersion: 1.2.1\n\n"


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _run(cwd: Path, *args: str, **extra: str) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    got = subprocess.run(
        [sys.executable, "-m", "forkpatch", *args],
        cwd=cwd,
        env=env(**extra),
        capture_output=True,
        text=True,
        errors="replace",
        preexec_fn=_limited,
        timeout=300,
        check=False,
    )
    return got, time.monotonic() - start


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example fork, its released wheel and a project with the example series."""
    root = tmp_path_factory.mktemp("hostile")
    make_fork(root / "fork")
    incoming = write_example_patches(root / "fork", "v1.2.1", root / "incoming")
    build_release_wheel(root / "fork", "v1.2.1", root / "release")
    project = root / "project"
    project.mkdir()
    assert fp_in(project, "init", "--fork-url", str(root / "fork"), "--base", "v1.2.1")[0] == 0
    assert fp_in(project, "import", *map(str, incoming))[0] == 0
    return root


def _release(base: Path) -> Path:
    return next((base / "release").glob("*.whl"))


def _with_member(base: Path, out: Path, name: str, data: bytes = b"pwned = 1\n") -> Path:
    """The released wheel plus one member named ``name`` (listed in RECORD too)."""
    src = _release(base)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zo:
        for info in zin.infolist():
            body = zin.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                body += f"{name},,\n".encode()
            zo.writestr(info, body)
        zi = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
        zi.filename = name
        zo.writestr(zi, data)
    return out


# ----------------------------------------------------------------------------- zip slip

SLIP_NAMES = [
    "../../evil.py",
    "../evil.py",
    "vllm/../../evil.py",
    "/tmp/forkpatch-evil.py",
    "C:/evil.py",
    "vllm\\..\\..\\evil.py",
    "vllm/./x.py",
    "vllm//x.py",
    "vllm/__init__.py",  # a second member with the name of an existing one
]


def _slipped(tmp_path: Path) -> list[Path]:
    found = [p for p in tmp_path.parent.rglob("*evil*") if "hostile" not in p.name]
    return found + list(Path("/tmp").glob("forkpatch-evil*"))


@pytest.mark.parametrize("name", SLIP_NAMES)
def test_zip_slip_members_are_refused_everywhere(base: Path, tmp_path: Path, name: str) -> None:
    wheel = _with_member(base, tmp_path / "hostile" / _release(base).name, name)
    before = _slipped(tmp_path)
    got, _ = _run(tmp_path, "verify", str(wheel))
    assert got.returncode == 1, got.stderr
    assert "RECORD: ok" not in got.stderr and repr(name) in got.stderr, got.stderr
    passing_report(wheel)
    got, _ = _run(tmp_path, "publish", str(wheel), "--to", str(tmp_path / "index"))
    assert got.returncode == 1 and repr(name) in got.stderr, got.stderr
    assert not (tmp_path / "index" / "packages").exists()
    project = base / "project"
    dist_before = tree_state(project / "dist")
    got, _ = _run(
        project,
        "build-wheel",
        "--mode",
        "overlay",
        "--base-wheel",
        str(wheel),
        "--out",
        str(tmp_path / "dist"),
    )
    assert got.returncode == 1 and repr(name) in got.stderr, got.stderr
    assert (
        not list((tmp_path / "dist").glob("*.whl")) and tree_state(project / "dist") == dist_before
    )
    assert _slipped(tmp_path) == before
    for text in (got.stderr,):
        assert "internal error" not in text and "Traceback" not in text


RECORD_ROWS = ["../../evil.py", "/etc/evil", "vllm\\..\\evil.py", "C:/evil.py"]


@pytest.mark.parametrize("row", RECORD_ROWS)
def test_unsafe_record_rows_fail_verification(tmp_path: Path, row: str) -> None:
    """RECORD names a path outside the environment that the zip does not even hold."""
    wheel = make_wheel(
        tmp_path / WHEEL,
        {"vllm/__init__.py": b""},
        extra_record_rows=((row, "sha256=AAAA", "1"),),
    )
    got, _ = _run(tmp_path, "verify", str(wheel))
    assert got.returncode == 1 and "RECORD: FAILED" in got.stderr, got.stderr
    assert repr(row) in got.stderr


# ----------------------------------------------------------------------------- zip bombs


def _bomb_member(declared: int, mib: int = 1024) -> dict[str, object]:
    data, _ = deflate_zeros(mib, crc=False)
    return {"name": "vllm/bomb.py", "data": data, "method": 8, "crc": 0, "size": declared}


def _small(name: str, data: bytes) -> dict[str, object]:
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    packed = co.compress(data) + co.flush()
    return {"name": name, "data": packed, "method": 8, "crc": zlib.crc32(data), "size": len(data)}


def _wheel_of(tmp_path: Path, members: list[dict[str, object]]) -> Path:
    names = {str(m["name"]) for m in members}
    extra = [] if f"{DI}/METADATA" in names else [_small(f"{DI}/METADATA", GOOD_META)]
    record = "".join(f"{m['name']},,\n" for m in [*members, *extra]) + f"{DI}/RECORD,,\n"
    return raw_zip(tmp_path / WHEEL, [*members, *extra, _small(f"{DI}/RECORD", record.encode())])


def _declared_tiny(tmp_path: Path) -> Path:
    return _wheel_of(tmp_path, [_bomb_member(declared=1000)])


def _metadata_bomb(tmp_path: Path) -> Path:
    m = _bomb_member(declared=len(GOOD_META))
    m["name"] = f"{DI}/METADATA"
    return _wheel_of(tmp_path, [m])


def _impossible_ratio(tmp_path: Path) -> Path:
    return _wheel_of(tmp_path, [_bomb_member(declared=4_000_000_000, mib=1)])


def _overlapping(tmp_path: Path) -> Path:
    data, crc = deflate_zeros(64)
    first = {"name": "vllm/m0.py", "data": data, "method": 8, "crc": crc, "size": 64 << 20}
    rest = [{**first, "name": f"vllm/m{i}.py", "at": 0} for i in range(1, 200)]
    return _wheel_of(tmp_path, [first, *rest])


def _declared_too_big(tmp_path: Path) -> Path:
    data, crc = deflate_zeros(1)
    return _wheel_of(
        tmp_path,
        [{"name": "vllm/x.py", "data": data, "method": 8, "crc": crc, "size": (1 << 20) + 10}],
    )


def _stored_two_sizes(tmp_path: Path) -> Path:
    return _wheel_of(
        tmp_path,
        [{"name": "vllm/x.py", "data": b"x" * 100, "method": 0, "crc": 0, "size": 10**9}],
    )


def _over_the_cap(tmp_path: Path) -> Path:
    """An honest 96 MiB member; the test sets FORKPATCH_WHEEL_MAX_BYTES to 32 MiB."""
    data, crc = deflate_zeros(96)
    return _wheel_of(
        tmp_path, [{"name": "vllm/big.py", "data": data, "method": 8, "crc": crc, "size": 96 << 20}]
    )


BOMBS: dict[str, tuple[Callable[[Path], Path], str, tuple[str, ...]]] = {
    # name: (builder, what the refusal says, commands that must refuse it)
    "declares 1000 bytes, inflates to 1 GiB": (
        _declared_tiny,
        "inflates past its declared",
        ("verify",),
    ),
    "METADATA declares 54 bytes, inflates to 1 GiB": (
        _metadata_bomb,
        "METADATA",
        ("verify", "publish", "build-wheel"),
    ),
    "declares 4 GB from 1 KiB": (
        _impossible_ratio,
        "zip bomb",
        ("verify", "publish", "build-wheel"),
    ),
    "200 members over one stream": (_overlapping, "overlap", ("verify", "publish", "build-wheel")),
    "declares more than it holds": (_declared_too_big, "CRC", ("verify",)),
    "stored with two sizes": (
        _stored_two_sizes,
        "two different sizes",
        ("verify", "publish", "build-wheel"),
    ),
    "over FORKPATCH_WHEEL_MAX_BYTES": (
        _over_the_cap,
        "FORKPATCH_WHEEL_MAX_BYTES",
        ("verify", "publish", "build-wheel"),
    ),
}


@pytest.mark.parametrize("variant", sorted(BOMBS))
def test_zip_bombs_are_refused_in_bounded_time_and_memory(
    base: Path, tmp_path: Path, variant: str
) -> None:
    build, says, commands = BOMBS[variant]
    wheel = build(tmp_path / "w")
    extra = {"FORKPATCH_WHEEL_MAX_BYTES": str(32 << 20)} if "MAX_BYTES" in variant else {}
    for command in commands:
        if command == "verify":
            args = ["verify", str(wheel)]
        elif command == "publish":
            args = ["publish", str(wheel), "--to", str(tmp_path / "index")]
        else:
            args = [
                "-C",
                str(base / "project"),
                "build-wheel",
                "--mode",
                "overlay",
                "--base-wheel",
                str(wheel),
                "--out",
                str(tmp_path / "dist"),
            ]
        got, seconds = _run(tmp_path, *args, **extra)
        text = got.stdout + got.stderr
        assert got.returncode == 1, f"{command}: {text}"
        assert says in text and WHEEL in text, f"{command}: {text}"
        assert "internal error" not in text and "MemoryError" not in text, f"{command}: {text}"
        assert seconds < 60, f"{command} took {seconds:.1f}s"
    assert not (tmp_path / "index" / "packages").exists()
    assert not list((tmp_path / "dist").glob("*.whl")) if (tmp_path / "dist").exists() else True


def test_an_honest_large_member_is_read_in_bounded_memory(tmp_path: Path) -> None:
    """1 GiB of zeros, honestly declared: verify streams it under the 768 MiB limit."""
    data, crc = deflate_zeros(1024)
    wheel = _wheel_of(
        tmp_path, [{"name": "vllm/big.py", "data": data, "method": 8, "crc": crc, "size": 1 << 30}]
    )
    got, _ = _run(tmp_path, "verify", str(wheel))
    assert "MemoryError" not in got.stderr and "internal error" not in got.stderr, got.stderr
    assert "vllm/big.py" in got.stderr  # RECORD has no hash for it: a mismatch, reported


_PROVENANCE = GOOD_PROVENANCE
# A provenance a wheel may carry that is not one forkpatch wrote: each is refused by the
# commands that read it (smoke, publish), naming the wheel and the field.
BAD_PROVENANCE: dict[str, tuple[bytes, str]] = {
    "not JSON": (b"{", "not valid JSON"),
    "a list": (b"[]", "expected an object"),
    "no tag": (
        json.dumps({k: v for k, v in _PROVENANCE.items() if k != "tag"}).encode(),
        "missing key(s) tag",
    ),
    "an unknown key": (json.dumps({**_PROVENANCE, "x": 1}).encode(), "unknown key(s) x"),
    "a patch with neither sha256 nor build step": (
        json.dumps({**_PROVENANCE, "patches": [{"name": "p"}]}).encode(),
        "patches[0]",
    ),
    "files that are no digests": (
        json.dumps({**_PROVENANCE, "files": {"vllm/x.py": 1}}).encode(),
        "files",
    ),
}


@pytest.mark.parametrize("label", sorted(BAD_PROVENANCE))
def test_a_wheel_with_a_bad_provenance_is_refused_naming_it(tmp_path: Path, label: str) -> None:
    raw, says = BAD_PROVENANCE[label]
    wheel = make_wheel(
        tmp_path / WHEEL, {"vllm/__init__.py": b"", f"{DI}/forkpatch-provenance.json": raw}
    )
    passing_report(wheel)
    for args in (
        ["smoke", str(wheel), "--tier", "static", "--deps", "none"],
        ["publish", str(wheel), "--to", str(tmp_path / "index")],
    ):
        got, _ = _run(tmp_path, *args)
        assert got.returncode == 1, (args, got.stderr)
        assert f"{WHEEL}: forkpatch-provenance.json" in got.stderr and says in got.stderr
        assert "Traceback" not in got.stderr and "internal error" not in got.stderr
    assert not (tmp_path / "index" / "packages").exists()


RELIABILITY = [
    Row(
        "hostile wheels",
        "zip-slip member names (.., absolute, drive letter, backslash, ., //, duplicate)",
        f"{len(SLIP_NAMES)} names x (verify, publish, build-wheel)",
        "refused naming the wheel and the member; no wheel built, nothing published",
        refused=str(3 * len(SLIP_NAMES)),
        outside=f"nothing (checked in {len(SLIP_NAMES)})",
    ),
    Row(
        "hostile wheels",
        "RECORD rows naming paths outside the environment",
        f"{len(RECORD_ROWS)} rows",
        "verify fails naming the row",
        refused=str(len(RECORD_ROWS)),
    ),
    Row(
        "hostile wheels",
        "zip bombs (size lies, impossible ratios, overlapping members, over the cap)",
        f"{len(BOMBS)} bombs, {sum(len(b[2]) for b in BOMBS.values())} command runs",
        "each refused in < 60 s under a 768 MiB address-space limit, never MemoryError; "
        "an honest 1 GiB member is streamed",
        refused=str(sum(len(b[2]) for b in BOMBS.values())),
    ),
    Row(
        "hostile wheels",
        "a provenance forkpatch did not write (not JSON, not an object, a missing or unknown "
        "key, a bad patch entry, bad file digests)",
        f"{len(BAD_PROVENANCE)} provenances x (smoke, publish)",
        "refused naming the wheel and the field, before any environment is made; nothing published",
        refused=str(2 * len(BAD_PROVENANCE)),
    ),
]
