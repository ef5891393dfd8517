"""Wheel integrity is backed by bytes: a base wheel whose RECORD fails is refused before
an overlay build uses it, and `verify` fails, naming the file, for a wheel changed after
its build even when RECORD (and the provenance) were rewritten to match.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from forkpatch.wheels.identity import PROVENANCE_FILENAME
from support.cli import fp
from support.reliability import Row
from support.smoke import ExampleBuild

Members = dict[str, bytes]


def _read(wheel: Path) -> Members:
    with zipfile.ZipFile(wheel) as zf:
        return {i.filename: zf.read(i) for i in zf.infolist()}


def _record_of(members: Members) -> bytes:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for name, data in members.items():
        if name.endswith("/RECORD"):
            writer.writerow((name, "", ""))
            continue
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow((name, f"sha256={digest}", str(len(data))))
    return buf.getvalue().encode()


def _write(members: Members, dest: Path, *, fix_record: bool = True) -> Path:
    record = next(n for n in members if n.endswith(".dist-info/RECORD"))
    if fix_record:
        members[record] = _record_of(members)
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return dest


def _provenance(members: Members) -> tuple[str, dict[str, object]]:
    name = next(n for n in members if n.endswith(PROVENANCE_FILENAME))
    return name, json.loads(members[name])


def _patched(members: Members) -> str:
    _name, prov = _provenance(members)
    files = prov["files"]
    assert isinstance(files, dict)
    return next(p for p, sha in sorted(files.items()) if sha and not p.endswith("_version.py"))


def _unpatched(members: Members) -> str:
    _name, prov = _provenance(members)
    files = prov["files"]
    assert isinstance(files, dict)
    return next(n for n in members if n.endswith(".py") and n not in files)


def _change_patched(m: Members) -> str:
    path = _patched(m)
    m[path] += b"\nimport os  # changed after the build\n"
    return path


def _change_patched_and_provenance(m: Members) -> str:
    path = _change_patched(m)
    name, prov = _provenance(m)
    prov["files"][path] = hashlib.sha256(m[path]).hexdigest()  # type: ignore[index]
    prov.pop("members_sha256")
    m[name] = json.dumps(prov).encode()
    return path


def _change_unpatched(m: Members) -> str:
    path = _unpatched(m)
    m[path] += b"\n# changed after the build\n"
    return "members are not the ones the build wrote"


def _change_unpatched_and_provenance(m: Members) -> str:
    path = _unpatched(m)
    m[path] += b"\n# changed after the build\n"
    name, prov = _provenance(m)
    prov.pop("members_sha256")
    m[name] = json.dumps(prov).encode()
    return path


def _add_file(m: Members) -> str:
    m["vllm/added_after_the_build.py"] = b"print('hello')\n"
    return "members are not the ones the build wrote"


def _record_hash_wrong(m: Members) -> str:
    path = _unpatched(m)
    m[path] += b"\n"  # RECORD left as it was
    return path


# What is done to the built wheel (returns what the error must name); whether RECORD is
# rewritten to match afterwards.
TAMPERINGS: dict[str, tuple[Callable[[Members], str], bool]] = {
    "patched file changed, RECORD rewritten": (_change_patched, True),
    "patched file changed, RECORD and provenance rewritten": (
        _change_patched_and_provenance,
        True,
    ),
    "unpatched file changed, RECORD rewritten": (_change_unpatched, True),
    "unpatched file changed, RECORD and provenance rewritten": (
        _change_unpatched_and_provenance,
        True,
    ),
    "a file added, RECORD rewritten": (_add_file, True),
    "RECORD hash wrong for a member": (_record_hash_wrong, False),
}


@pytest.fixture
def project(example_build: ExampleBuild, tmp_path: Path) -> Path:
    dest = tmp_path / "project"
    shutil.copytree(example_build.project, dest, symlinks=True)
    return dest


def test_the_built_wheel_verifies(example_build: ExampleBuild, project: Path) -> None:
    proc = fp(project, "verify", str(example_build.wheel))
    assert proc.returncode == 0, proc.stderr
    assert "matches the current series" in proc.stderr


@pytest.mark.parametrize("case", list(TAMPERINGS))
def test_verify_fails_for_a_wheel_changed_after_its_build(
    example_build: ExampleBuild, project: Path, tmp_path: Path, case: str
) -> None:
    tamper, fix_record = TAMPERINGS[case]
    members = _read(example_build.wheel)
    named = tamper(members)
    wheel = _write(members, tmp_path / example_build.wheel.name, fix_record=fix_record)
    proc = fp(project, "verify", str(wheel))
    assert proc.returncode == 1, proc.stderr
    assert named in proc.stderr, proc.stderr


OUTSIDE = [
    "patched file changed, RECORD rewritten",
    "unpatched file changed, RECORD rewritten",
    "a file added, RECORD rewritten",
]


@pytest.mark.parametrize("case", OUTSIDE)
def test_verify_outside_a_project_checks_the_recorded_hashes(
    example_build: ExampleBuild, tmp_path: Path, case: str
) -> None:
    tamper, fix_record = TAMPERINGS[case]
    members = _read(example_build.wheel)
    named = tamper(members)
    wheel = _write(members, tmp_path / example_build.wheel.name, fix_record=fix_record)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    proc = fp(outside, "verify", str(wheel))
    assert proc.returncode == 1 and named in proc.stderr, proc.stderr


def test_old_provenance_is_read_and_says_what_it_cannot_prove(
    example_build: ExampleBuild, project: Path, tmp_path: Path
) -> None:
    members = _read(example_build.wheel)
    path = _patched(members)
    name, prov = _provenance(members)
    prov.pop("files")
    prov.pop("members_sha256")
    members[name] = json.dumps(prov).encode()
    wheel = _write(members, tmp_path / example_build.wheel.name)
    proc = fp(project, "verify", str(wheel))
    assert proc.returncode == 0, proc.stderr
    assert "records no hashes" in proc.stderr
    members[path] += b"\nimport os  # changed after the build\n"
    proc = fp(project, "verify", str(_write(members, wheel)))
    assert proc.returncode == 1 and path in proc.stderr, proc.stderr


def _base_missing_member(m: Members) -> None:
    del m[next(n for n in m if n.endswith(".py") and "_version" not in n)]


def _base_unlisted_member(m: Members) -> None:
    m["vllm/unlisted.py"] = b"x = 1\n"


def _base_bad_size(m: Members) -> None:
    path = next(n for n in m if n.endswith(".py") and "_version" not in n)
    m[path] += b"# one more line\n"


BAD_BASES: dict[str, tuple[Callable[[Members], None], str]] = {
    "a member's bytes changed": (_base_bad_size, "hash/size mismatch"),
    "a member missing from RECORD": (_base_unlisted_member, "not in RECORD: vllm/unlisted.py"),
    "RECORD lists a missing member": (_base_missing_member, "in RECORD but not in the wheel"),
}


@pytest.mark.parametrize("case", list(BAD_BASES))
def test_an_overlay_build_refuses_a_base_wheel_whose_record_fails(
    example_build: ExampleBuild, project: Path, tmp_path: Path, case: str
) -> None:
    damage, message = BAD_BASES[case]
    members = _read(example_build.base_wheel)
    damage(members)
    (tmp_path / "bad").mkdir()
    base = _write(members, tmp_path / "bad" / example_build.base_wheel.name, fix_record=False)
    proc = fp(project, "build-wheel", "--mode", "overlay", "--base-wheel", str(base))
    assert proc.returncode == 1, proc.stderr
    assert base.name in proc.stderr and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


RELIABILITY = [
    Row(
        "wheel integrity",
        "a built wheel changed afterwards: a patched file (RECORD rewritten; RECORD and "
        "provenance rewritten), an unpatched file (the same), an added file, a wrong RECORD "
        "hash",
        f"{len(TAMPERINGS)} tamperings in a project + {len(OUTSIDE)} outside one",
        "verify exits 1 naming the file (the series re-applied in memory, the build's "
        "recorded hashes); an older provenance is read and says what it cannot prove",
        refused=str(len(TAMPERINGS) + len(OUTSIDE)),
    ),
    Row(
        "wheel integrity",
        "a base wheel whose RECORD fails (a member's bytes changed, a member missing from "
        "RECORD, RECORD listing a missing member)",
        f"{len(BAD_BASES)} base wheels",
        "build-wheel refuses before building, naming the wheel and the member",
        refused=str(len(BAD_BASES)),
    ),
]
