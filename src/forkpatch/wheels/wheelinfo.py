"""Facts about a wheel file read on the host: sha256, name, version, the requirements,
the top-level names and the provenance, validated once. The wheel is refused when its
member names or sizes fail wheelzip's checks, when it has not one .dist-info, or when
METADATA names another distribution; the error is a SmokeError (smoke and publish read
wheels through this module, and their messages and exit status are the smoke run's)."""

from __future__ import annotations

import hashlib
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from email.parser import BytesHeaderParser
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from forkpatch.errors import BuildError, SmokeError
from forkpatch.fsutil import file_sha256
from forkpatch.wheels.identity import PROVENANCE_FILENAME, Provenance
from forkpatch.wheels.wheelzip import SizeFacts, check_member_names, check_sizes


@dataclass(frozen=True)
class WheelInfo:
    path: Path
    sha256: str
    name: str  # canonical distribution name, e.g. "1cat-vllm"
    version: str  # METADATA's Version (what importlib.metadata reports)
    tags: str  # "py3-none-any"
    requires: tuple[str, ...] = ()
    provenance_bytes: bytes | None = field(default=None, repr=False)
    #: The wheel's forkpatch provenance, validated (None: the wheel has none).
    provenance: Provenance | None = None
    #: Top-level import names the wheel installs ("vllm", "_1cat_vllm_dist_alias", ...).
    top_level: tuple[str, ...] = ()

    @property
    def provenance_sha256(self) -> str | None:
        if self.provenance_bytes is None:
            return None
        return hashlib.sha256(self.provenance_bytes).hexdigest()


def read_wheel(path: Path) -> WheelInfo:
    """Read a wheel's identity; SmokeError when it is not a readable wheel."""
    path = Path(path)
    if not path.is_file():
        raise SmokeError(f"{path}: no such wheel file", tip="give the path of a built .whl")
    try:
        name, _version, _build, _tags = parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        raise SmokeError(
            f"{path.name} is not a wheel file name ({exc})",
            tip="give the .whl file that a build produced",
        ) from None
    tags = "-".join(path.name[: -len(".whl")].split("-")[-3:])
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            try:
                check_member_names(names, source=path)
                check_sizes(
                    (
                        SizeFacts(
                            i.filename,
                            i.compress_type,
                            i.compress_size,
                            i.file_size,
                            i.header_offset,
                            # the local header is at least 30 bytes plus the name
                            i.header_offset + 30 + len(i.orig_filename.encode()) + i.compress_size,
                        )
                        for i in zf.infolist()
                    ),
                    source=path,
                )
            except BuildError as exc:
                raise SmokeError(exc.message, tip=exc.tip) from None
            dist_infos = sorted(
                {
                    n.split("/", 1)[0]
                    for n in names
                    if "/" in n and n.split("/", 1)[0].endswith(".dist-info")
                }
            )
            if len(dist_infos) != 1:
                raise SmokeError(
                    f"{path.name}: expected one .dist-info directory, found {len(dist_infos)}",
                    tip="rebuild the wheel",
                )
            di = dist_infos[0]
            meta = BytesHeaderParser().parsebytes(_read_small(zf, f"{di}/METADATA", path))
            prov_name = f"{di}/{PROVENANCE_FILENAME}"
            prov = _read_small(zf, prov_name, path) if prov_name in names else None
    except (zipfile.BadZipFile, KeyError, OSError, zlib.error) as exc:
        raise SmokeError(
            f"{path}: not a readable wheel ({exc})", tip="rebuild or re-download the wheel"
        ) from None
    meta_name = meta.get("Name") or ""
    if canonicalize_name(meta_name) != name:
        raise SmokeError(
            f"{path.name}: METADATA names {meta_name!r}, the file name {name!r}",
            tip="the wheel was renamed by hand; use the file the build wrote",
        )
    return WheelInfo(
        path=path.resolve(),
        sha256=file_sha256(path),
        name=str(name),
        version=str(meta.get("Version") or ""),
        tags=tags,
        requires=tuple(meta.get_all("Requires-Dist") or ()),
        provenance_bytes=prov,
        provenance=_provenance(prov, path),
        top_level=_top_level(names),
    )


def _provenance(data: bytes | None, path: Path) -> Provenance | None:
    """The provenance a wheel carries, through :meth:`Provenance.from_json`; a wrong or
    missing field is a SmokeError naming the wheel and the field."""
    if data is None:
        return None
    try:
        return Provenance.from_json(data, source=f"{path.name}: {PROVENANCE_FILENAME}")
    except BuildError as exc:
        raise SmokeError(
            exc.message,
            tip="the wheel's provenance is damaged or from another forkpatch version: "
            "rebuild the wheel with `forkpatch build-wheel`",
        ) from None


def _top_level(names: Iterable[str]) -> tuple[str, ...]:
    """Importable top-level names among a wheel's members (packages and modules)."""
    out: set[str] = set()
    for n in names:
        first = n.split("/", 1)[0]
        if first.endswith((".dist-info", ".data")):
            continue
        if "/" in n:
            out.add(first)
        elif first.endswith(".py"):
            out.add(first[: -len(".py")])
        elif first.endswith((".so", ".pyd")):
            out.add(first.split(".", 1)[0])
    return tuple(sorted(out))


#: METADATA and the provenance are a few kilobytes; a wheel declaring more is refused.
MAX_SMALL_MEMBER = 16 << 20


def _read_small(zf: zipfile.ZipFile, name: str, path: Path) -> bytes:
    """A small member, read in bounded chunks: never more than its declared size (which
    is capped), so a member that inflates to gigabytes costs nothing."""
    info = zf.getinfo(name)
    if info.file_size > MAX_SMALL_MEMBER:
        raise SmokeError(
            f"{path}: {name} declares {info.file_size:,} bytes (at most "
            f"{MAX_SMALL_MEMBER:,} expected); refusing the wheel",
            tip="rebuild the wheel with a standard tool",
        )
    out = bytearray()
    with zf.open(info) as fh:  # zipfile stops at the declared size and checks the CRC
        while chunk := fh.read(1 << 16):
            out += chunk
            if len(out) > info.file_size:
                raise SmokeError(f"{path}: {name} inflates past its declared size")
    return bytes(out)
