"""Check a built wheel against its RECORD and against the series it claims to be.

:func:`verify_wheel` reads every member (CRC-checked), recomputes each RECORD
hash and size, and reports members missing from the zip or from RECORD, the
provenance and version consistency, and the bytes of every file the series
changed against the hashes the build recorded. :func:`matches_series` compares
the wheel's provenance to what a series says it should be, and
:func:`content_differences` those files' bytes to the series re-applied.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from forkpatch.errors import BuildError, ForkpatchError
from forkpatch.git import blob_id
from forkpatch.wheels.identity import PROVENANCE_FILENAME, Provenance
from forkpatch.wheels.overlay import (
    DEFAULT_VERSION_FILE,
    metadata_field,
    rewrite_version_file,
)
from forkpatch.wheels.wheelzip import RecordCheck, WheelZip, check_record, record_digest

__all__ = ["VerifyReport", "content_differences", "matches_series", "verify_wheel"]


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
    #: what the check could not prove (an older provenance without file hashes)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.mismatches or self.missing or self.extra or self.errors)

    def problems(self) -> list[str]:
        return RecordCheck(self.mismatches, self.missing, self.extra, self.errors).problems()


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
        check = check_record(wz, record_name)
        report.mismatches, report.missing = check.mismatches, check.missing
        report.extra, report.errors = check.extra, check.errors
        if check.unreadable:
            return report

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
        if report.provenance is not None:
            _check_recorded_files(wz, report, report.provenance)
            members = report.provenance.members_sha256
            if members is not None and report.ok:
                skip = [record_name, prov_name]
                if record_digest(check.listed, skip=skip) != members:
                    report.errors.append(
                        "its members are not the ones the build wrote (a member was added, "
                        "removed or changed after the build, and RECORD rewritten to match)"
                    )
    return report


def _member_sha256(wz: WheelZip, name: str) -> str | None:
    entry = wz.by_name.get(name)
    if entry is None or entry.is_dir:
        return None
    digest = hashlib.sha256()
    for chunk in wz.chunks(entry):
        digest.update(chunk)
    return digest.hexdigest()


def _check_recorded_files(wz: WheelZip, report: VerifyReport, prov: Provenance) -> None:
    """The bytes of every file the series changed against the hashes the build recorded."""
    if prov.files is None or prov.members_sha256 is None:
        if prov.builder.mode == "overlay":
            report.notes.append(
                f"its {PROVENANCE_FILENAME} (an older forkpatch) records no hashes of its "
                "members: a change made after the build with RECORD rewritten to match "
                "shows only where the series is re-applied (run verify in the project)"
            )
        if prov.files is None:
            return
    for path, want in prov.files.items():
        try:
            got = _member_sha256(wz, path)
        except ForkpatchError as exc:
            report.errors.append(exc.message)
            continue
        if got == want:
            continue
        if want is None:
            report.errors.append(f"{path}: the series deletes it, but the wheel has it")
        elif got is None:
            report.errors.append(f"{path}: changed by the series, but missing from the wheel")
        else:
            report.errors.append(
                f"{path}: the build recorded sha256 {want}, the wheel holds {got} "
                "(changed after the build)"
            )


def content_differences(
    report: VerifyReport,
    expected: Mapping[str, bytes | None],
    tree: Mapping[str, str],
    *,
    version_file: str | None = DEFAULT_VERSION_FILE,
) -> list[str]:
    """Files whose bytes in the wheel are not what the series gives them (``expected``:
    in-wheel path -> bytes, None for deleted; ``tree``: in-wheel path -> blob id of
    every file of the series' result; both from the series re-applied in memory).

    The version file is compared after the version rewrite an overlay build makes; a
    member the tree does not hold (generated by the fork's build) is not compared.
    """
    diffs: list[str] = []
    with WheelZip(report.path) as wz:
        for entry in wz.entries:
            oid = tree.get(entry.name)
            if entry.is_dir or oid is None or entry.name in expected:
                continue
            if entry.name == version_file:
                continue
            try:
                same = blob_id(wz.read(entry), len(oid)) == oid
            except ForkpatchError as exc:
                diffs.append(exc.message)
                continue
            if not same:
                diffs.append(
                    f"{entry.name}: its bytes are not the fork's file at the series' base "
                    "commit (changed after the build)"
                )
        for path, want in sorted(expected.items()):
            member = wz.by_name.get(path)
            if want is None:
                if member is not None:
                    diffs.append(f"{path}: the series deletes it, but the wheel has it")
                continue
            if member is None:
                diffs.append(f"{path}: changed by the series, but missing from the wheel")
                continue
            if path == version_file and report.version is not None:
                want = rewrite_version_file(want, report.version, path=path)
            try:
                same = wz.read(member) == want
            except ForkpatchError as exc:
                diffs.append(exc.message)
                continue
            if not same:
                diffs.append(f"{path}: its bytes are not what the series gives it")
    return diffs


def matches_series(report: VerifyReport, expected: Provenance) -> list[str]:
    """Differences between the wheel's provenance and ``expected`` (empty: it matches).

    ``forkpatch_version`` and the builder's image id / base wheel hash / build
    args are facts of one build, not of the series, so they are not compared;
    the builder *mode* is.
    """
    got = report.provenance
    if got is None:
        return [f"{report.path.name} has no {PROVENANCE_FILENAME}; it was not built by forkpatch"]
    diffs = _base_diffs(got, expected)
    if got.builder.mode != expected.builder.mode:
        diffs.append(
            f"builder.mode: wheel has {got.builder.mode!r}, series expects {expected.builder.mode!r}"
        )
    diffs += _patch_diffs(got, expected)
    if report.errors or report.mismatches or report.missing or report.extra:
        diffs.append(f"the wheel itself fails verification ({len(report.problems())} problem(s))")
    return diffs


def provenance_diffs(got: Provenance, expected: Provenance) -> list[str]:
    """Where a wheel's provenance names another series than ``expected``: the fork, its
    base and the patches (names, order, each file's sha256, build steps). The builder
    (overlay or container, its image, base wheel) is a fact of one build, not compared."""
    return _base_diffs(got, expected) + _patch_diffs(got, expected)


def _base_diffs(got: Provenance, expected: Provenance) -> list[str]:
    diffs: list[str] = []
    for attr in ("fork_url", "tag", "commit"):
        a, b = getattr(got, attr), getattr(expected, attr)
        if a != b:
            diffs.append(f"{attr}: wheel has {a!r}, series expects {b!r}")
    return diffs


def _patch_diffs(got: Provenance, expected: Provenance) -> list[str]:
    diffs: list[str] = []
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
    return diffs
