"""Helpers for the hardening suite (import as ``hardkit``; no conftest involved).

- :func:`fp` runs forkpatch in a subprocess, :func:`fp_in` in this process (no start-up
  cost; the kill hook is off here because the environment of pytest does not set it);
- :class:`Stash` keeps a scenario at a fixed absolute path and restores it byte for byte
  (git worktrees and state.json hold absolute paths, so copies must live where the
  original did);
- :func:`visible` is what the user owns: series.yaml, patches/ and dist/;
- :class:`Row` is one row of docs/reliability.md (see ``reliability.py``).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fptest import GIT_ENV

HERE = Path(__file__).resolve().parent
TMP_NAME = re.compile(r"\A\..+(?:\.forkpatch-tmp|\.forkpatch-\d+\.tmp)\Z")
OWNED = ("series.yaml", "patches", "dist")


def env(**extra: str) -> dict[str, str]:
    e = {**os.environ, **GIT_ENV}
    for key in (
        "FORKPATCH_FORK_REPO",
        "FORKPATCH_TEST_KILL_AT",
        "FORKPATCH_TEST_COUNT_WRITES",
        "FORKPATCH_TEST_PAUSE_AFTER",
        "TWINE_USERNAME",
        "TWINE_PASSWORD",
    ):
        e.pop(key, None)
    e.update(extra)
    return e


def fp(
    cwd: Path, *args: str, extra_env: Mapping[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -m forkpatch ARGS`` in ``cwd``; text output, never raises on exit codes."""
    return subprocess.run(
        [sys.executable, "-m", "forkpatch", *args],
        cwd=cwd,
        check=False,
        env=env(**(extra_env or {})),
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
    )


def fp_in(project: Path, *args: str) -> tuple[int, str, str]:
    """forkpatch's CLI in this process, on ``project`` (-C): (exit code, stdout, stderr)."""
    from forkpatch.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved = os.environ.pop("FORKPATCH_FORK_REPO", None)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["-C", str(project), *args])
    finally:
        if saved is not None:
            os.environ["FORKPATCH_FORK_REPO"] = saved
    return code, out.getvalue(), err.getvalue()


def visible(project: Path) -> dict[str, bytes]:
    """Bytes of series.yaml, patches/** and dist/** (temporary files left out)."""
    out: dict[str, bytes] = {}
    for name in OWNED:
        p = project / name
        if p.is_file():
            out[name] = p.read_bytes()
        elif p.is_dir():
            for f in sorted(p.rglob("*")):
                rel = f.relative_to(project)
                if f.is_file() and not any(
                    TMP_NAME.match(part) or part.startswith(".forkpatch-stage-")
                    for part in rel.parts
                ):
                    out[rel.as_posix()] = f.read_bytes()
    return out


def leftovers(project: Path) -> list[str]:
    """Temporary files or staging directories forkpatch left in what the user owns."""
    found = []
    for d in (project, project / "patches", project / "dist"):
        if d.is_dir():
            for f in d.iterdir():
                if TMP_NAME.match(f.name) or f.name.startswith(".forkpatch-stage-"):
                    found.append(f.relative_to(project).as_posix())
    return sorted(found)


class Stash:
    """A scenario kept aside and put back at the same absolute path for every run."""

    def __init__(self, live: Path) -> None:
        self.live = live
        self.saved = live.parent / (live.name + ".stash")
        if self.saved.exists():
            shutil.rmtree(self.saved)
        shutil.copytree(live, self.saved, symlinks=True)

    def restore(self) -> Path:
        if self.live.exists():
            shutil.rmtree(self.live)
        shutil.copytree(self.saved, self.live, symlinks=True)
        return self.live


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args],
        check=True,
        env=env(),
        capture_output=True,
        text=True,
    ).stdout.strip()


@dataclass(frozen=True)
class Row:
    """One row of docs/reliability.md: each hardening module lists its rows in
    ``RELIABILITY``, computed from its case tables (so the figures are the tests')."""

    category: str
    what: str
    tried: str
    outcome: str
    refused: str = "-"  # how many of the cases were refused (where refusal is the outcome)
    outside: str = "-"  # what was found written outside the project, in how many checks


# ----------------------------------------------------------------------------- scratch projects


def scratch_fork(path: Path, files: Mapping[str, str], *, tag: str = "v1") -> Path:
    """A real git repository with ``files`` committed and tagged ``tag``."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    for rel, text in files.items():
        f = path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "fork")
    git(path, "tag", "-a", tag, "-m", tag)
    return path


def modify(path: str, old: str, new: str, *, header: str = "") -> str:
    """A git diff of ``path`` from the text ``old`` to ``new`` (made by git itself)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp, "a"), Path(tmp, "b")
        a.write_text(old)
        b.write_text(new)
        proc = subprocess.run(
            ["git", "diff", "--no-index", "--no-color", str(a), str(b)],
            capture_output=True,
            text=True,
            check=False,
        )
    body = proc.stdout.split("\n@@", 1)[1]
    return f"{header}diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@" + body


def scratch_project(
    tmp_path: Path, files: Mapping[str, str], patches: list[tuple[str, str]]
) -> tuple[Path, Path]:
    """(project, fork): a project on a scratch fork at v1 with ``patches`` (name, diff)."""
    fork = scratch_fork(tmp_path / "fork", files)
    project = tmp_path / "project"
    project.mkdir()
    code, _, err = fp_in(project, "init", "--fork-url", str(fork), "--base", "v1")
    assert code == 0, err
    series = (project / "series.yaml").read_text().replace("patches: []\n", "patches:\n")
    for name, text in patches:
        (project / "patches" / f"{name}.patch").write_text(f"Patch {name}.\n\n{text}")
        series += f"  - name: {name}\n    file: {name}.patch\n    summary: {name}\n"
    (project / "series.yaml").write_text(series)
    return project, fork


def tree_state(root: Path) -> dict[str, tuple[str, bytes]]:
    """Every entry under ``root`` (links as links, never followed): to prove nothing moved."""
    out: dict[str, tuple[str, bytes]] = {}
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in [*dirnames, *filenames]:
            p = Path(dirpath, name)
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p).encode())
            elif p.is_file():
                out[rel] = (oct(p.stat().st_mode & 0o777), p.read_bytes())
            elif p.is_dir():
                out[rel] = ("dir", b"")
    return out


def make_wheel(
    path: Path,
    members: Mapping[str, bytes],
    *,
    name: str = "1cat-vllm",
    version: str = "1.2.1",
    record: bool = True,
    extra_record_rows: tuple[tuple[str, str, str], ...] = (),
) -> Path:
    """A wheel written with :mod:`zipfile` (member names kept exactly as given, hostile
    ones included), with METADATA, WHEEL and a RECORD listing every member."""
    import base64
    import hashlib
    import zipfile

    di = f"{name.replace('-', '_')}-{version}.dist-info"
    files = dict(members)
    files.setdefault(
        f"{di}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n".encode()
    )
    files.setdefault(
        f"{di}/WHEEL", b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    rows = [
        f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
        for n, d in files.items()
    ]
    rows += [",".join(r) for r in extra_record_rows]
    rows.append(f"{di}/RECORD,,")
    if record:
        files[f"{di}/RECORD"] = ("\n".join(rows) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, d in files.items():
            zi = zipfile.ZipInfo(n, date_time=(2026, 1, 1, 0, 0, 0))
            zi.filename = n  # ZipInfo would normalise some names; keep them as given
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = 0o100644 << 16
            zf.writestr(zi, d)
    return path


def passing_report(wheel: Path, tiers: tuple[str, ...] = ("static", "sm70")) -> Path:
    """A consistent smoke report beside ``wheel`` in which ``tiers`` passed (one check each)."""
    import hashlib

    from forkpatch.smoke.report import REPORT_SUFFIX, CheckResult, SmokeReport, write_report

    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    report = SmokeReport(
        wheels=[{"file": wheel.name, "sha256": sha}],
        primary_sha256=sha,
        version="1.2.1",
        requested_tiers=list(tiers),
        checks=[CheckResult(f"{t}.check", t, "passed") for t in tiers],
        environment={},
        device={},
        patches=[],
    )
    return write_report(report.to_json(), wheel.with_name(wheel.name + REPORT_SUFFIX))


def raw_zip(path: Path, members: list[dict[str, object]]) -> Path:
    """A zip written byte by byte, so that a test can lie in it: each member is a dict with
    ``name``, ``data`` (the stored bytes, already compressed for method 8), ``method``,
    ``crc``, ``size`` (the declared uncompressed size) and optionally ``at`` (reuse the
    local header of member number ``at``: overlapping members)."""
    import struct

    out = bytearray()
    central = bytearray()
    offsets: list[int] = []
    for m in members:
        name = str(m["name"]).encode("utf-8")
        data = bytes(m["data"])  # type: ignore[arg-type]
        method, crc, size = int(m["method"]), int(m["crc"]), int(m["size"])  # type: ignore[call-overload]
        if "at" in m:
            offset = offsets[int(m["at"])]  # type: ignore[call-overload]
        else:
            offset = len(out)
            out += struct.pack(
                "<4s2B4HL2L2H",
                b"PK\x03\x04",
                20,
                0,
                0x800,
                method,
                0,
                33,
                crc,
                len(data),
                size,
                len(name),
                0,
            )
            out += name + data
        offsets.append(offset)
        central += struct.pack(
            "<4s4B4HL2L5H2L",
            b"PK\x01\x02",
            20,
            3,
            20,
            0,
            0x800,
            method,
            0,
            33,
            crc,
            len(data),
            size,
            len(name),
            0,
            0,
            0,
            0,
            0o100644 << 16,
            offset,
        )
        central += name
    cd_offset = len(out)
    out += central
    out += struct.pack(
        "<4s4H2LH", b"PK\x05\x06", 0, 0, len(members), len(members), len(central), cd_offset, 0
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(out))
    return path


def deflate_zeros(mib: int, *, crc: bool = True) -> tuple[bytes, int]:
    """(raw deflate stream of ``mib`` MiB of zeros, its CRC or 0): one full-flushed 1 MiB
    block repeated (each block starts afresh, so they are identical), about 1 KiB each."""
    import zlib

    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = bytes(1 << 20)
    block = co.compress(chunk) + co.flush(zlib.Z_FULL_FLUSH)
    value = 0
    if crc:
        for _ in range(mib):
            value = zlib.crc32(chunk, value)
    return block * mib + co.flush(), value
