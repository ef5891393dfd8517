"""Check a built wheel against its RECORD and against the series it claims to be.

:func:`verify_wheel` reads every member (CRC-checked), recomputes each RECORD
hash and size, and reports members missing from the zip or from RECORD, plus
the provenance and version consistency. :func:`matches_series` compares the
wheel's provenance to what a series says it should be.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from forkpatch.errors import BuildError, ForkpatchError
from forkpatch.wheels.identity import PROVENANCE_FILENAME, Provenance
from forkpatch.wheels.overlay import metadata_field
from forkpatch.wheels.wheelzip import WheelZip, member_name_problem

__all__ = ["VerifyReport", "matches_series", "verify_wheel"]


@dataclass
class VerifyReport:
    """What :func:`verify_wheel` found. ``ok`` is True when nothing is wrong."""

    path: Path
    dist_info: str | None = None
    name: str | None = None
    version: str | None = None
    members: int = 0
    #: "path: RECORD says sha256=… / 123 bytes, member has sha256=… / 124 bytes"
    mismatches: list[str] = field(default_factory=list)
    #: listed in RECORD, absent from the zip
    missing: list[str] = field(default_factory=list)
    #: in the zip, absent from RECORD
    extra: list[str] = field(default_factory=list)
    #: anything else (unreadable member, version disagreement, bad provenance)
    errors: list[str] = field(default_factory=list)
    provenance: Provenance | None = None

    @property
    def ok(self) -> bool:
        return not (self.mismatches or self.missing or self.extra or self.errors)

    def problems(self) -> list[str]:
        return (
            [f"hash/size mismatch: {m}" for m in self.mismatches]
            + [f"in RECORD but not in the wheel: {m}" for m in self.missing]
            + [f"in the wheel but not in RECORD: {m}" for m in self.extra]
            + self.errors
        )


def verify_wheel(path: Path) -> VerifyReport:
    """Recompute every RECORD hash and size of the wheel at ``path``.

    Raises BuildError only when the file is not a readable zip at all; every
    other problem is collected in the report.
    """
    path = Path(path)
    report = VerifyReport(path=path)
    with WheelZip(path) as wz:
        report.members = len(wz.entries)
        tops = sorted(
            {
                e.name.split("/", 1)[0]
                for e in wz.entries
                if "/" in e.name and e.name.split("/", 1)[0].endswith(".dist-info")
            }
        )
        if len(tops) != 1:
            report.errors.append(f"expected one .dist-info directory, found {tops or 'none'}")
            return report
        di = report.dist_info = tops[0]
        record_name = f"{di}/RECORD"
        if record_name not in wz.by_name:
            report.errors.append(f"no {record_name}")
            return report
        try:
            record_text = wz.read(record_name).decode("utf-8")
            rows = [r for r in csv.reader(io.StringIO(record_text)) if r]
        except (ForkpatchError, UnicodeDecodeError, csv.Error) as exc:
            report.errors.append(f"{record_name} unreadable: {exc}")
            return report
        listed: dict[str, tuple[str, str]] = {}
        for row in rows:
            if len(row) != 3:
                report.errors.append(f"{record_name}: malformed line {row!r}")
                continue
            problem = member_name_problem(row[0])
            if problem is not None:
                # An installer would write this path outside the environment (zip slip).
                report.errors.append(f"{record_name}: {row[0]!r} is unsafe ({problem})")
                continue
            if row[0] in listed:
                report.errors.append(f"{record_name}: {row[0]} listed twice")
            listed[row[0]] = (row[1], row[2])
        for e in wz.entries:
            if e.is_dir:
                continue
            if e.name not in listed:
                report.extra.append(e.name)
                continue
            want_hash, want_size = listed[e.name]
            if e.name == record_name:
                if want_hash or want_size:
                    report.errors.append(f"{record_name} lists a hash for itself")
                continue
            algo = want_hash.partition("=")[0] or "sha256"
            try:
                # RECORD may use any hashlib algorithm >= sha256; recompute with it.
                hasher = hashlib.new(algo)
            except ValueError:
                report.errors.append(f"{e.name}: unknown hash algorithm {algo!r} in RECORD")
                continue
            size = 0
            try:
                for chunk in wz.chunks(e):  # streamed: bounded memory whatever the member
                    hasher.update(chunk)
                    size += len(chunk)
            except ForkpatchError as exc:
                report.errors.append(exc.message)
                continue
            digest = base64.urlsafe_b64encode(hasher.digest()).rstrip(b"=").decode()
            got_hash, got_size = f"{algo}={digest}", str(size)
            if (want_hash, want_size) != (got_hash, got_size):
                report.mismatches.append(
                    f"{e.name}: RECORD says {want_hash or '-'} / {want_size or '-'} bytes, "
                    f"member has {got_hash} / {got_size} bytes"
                )
        in_zip = set(wz.by_name)
        report.missing = [n for n in listed if n not in in_zip]

        metadata_name = f"{di}/METADATA"
        if metadata_name in wz.by_name:
            try:
                metadata = wz.read(metadata_name)
                report.name = metadata_field(metadata, "Name")
                report.version = metadata_field(metadata, "Version")
            except ForkpatchError as exc:
                report.errors.append(exc.message)
        else:
            report.errors.append(f"no {metadata_name}")
        if report.version is not None:
            try:
                _n, file_version, _b, _t = parse_wheel_filename(path.name)
                if str(file_version) != report.version:
                    report.errors.append(
                        f"file name has version {file_version}, METADATA {report.version}"
                    )
            except InvalidWheelFilename as exc:
                report.errors.append(f"bad wheel file name: {exc}")
            if not di.endswith(f"-{report.version}.dist-info"):
                report.errors.append(f"{di} does not carry METADATA's version {report.version}")

        prov_name = f"{di}/{PROVENANCE_FILENAME}"
        if prov_name in wz.by_name:
            try:
                report.provenance = Provenance.from_json(wz.read(prov_name), source=prov_name)
            except BuildError as exc:
                report.errors.append(exc.message)
    return report


def matches_series(report: VerifyReport, expected: Provenance) -> list[str]:
    """Differences between the wheel's provenance and ``expected`` (empty: it matches).

    ``forkpatch_version`` and the builder's image id / base wheel hash / build
    args are facts of one build, not of the series, so they are not compared;
    the builder *mode* is.
    """
    got = report.provenance
    if got is None:
        return [f"{report.path.name} has no {PROVENANCE_FILENAME}; it was not built by forkpatch"]
    diffs: list[str] = []
    for attr in ("fork_url", "tag", "commit"):
        a, b = getattr(got, attr), getattr(expected, attr)
        if a != b:
            diffs.append(f"{attr}: wheel has {a!r}, series expects {b!r}")
    if got.builder.mode != expected.builder.mode:
        diffs.append(
            f"builder.mode: wheel has {got.builder.mode!r}, series expects {expected.builder.mode!r}"
        )
    got_names = [p.name for p in got.patches]
    want_names = [p.name for p in expected.patches]
    if got_names != want_names:
        missing = [n for n in want_names if n not in got_names]
        extra = [n for n in got_names if n not in want_names]
        if missing:
            diffs.append(f"patches missing from the wheel: {', '.join(missing)}")
        if extra:
            diffs.append(f"patches in the wheel but not in the series: {', '.join(extra)}")
        if not missing and not extra:
            diffs.append(f"patch order differs: wheel {got_names}, series {want_names}")
    want_by_name = {p.name: p for p in expected.patches}
    for i, p in enumerate(got.patches):
        w = want_by_name.get(p.name)
        if w is None:
            continue
        if p.sha256 != w.sha256:
            diffs.append(
                f"patches[{i}] {p.name}: wheel has sha256 {p.sha256}, series has {w.sha256}"
            )
        if p.build_step != w.build_step:
            diffs.append(
                f"patches[{i}] {p.name}: wheel has build step {p.build_step}, series has {w.build_step}"
            )
    if report.errors or report.mismatches or report.missing or report.extra:
        diffs.append(f"the wheel itself fails verification ({len(report.problems())} problem(s))")
    return diffs
