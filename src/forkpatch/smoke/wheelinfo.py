"""Facts about a wheel file read on the host: sha256, name, version, provenance."""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from email.parser import BytesHeaderParser
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from forkpatch.errors import SmokeError
from forkpatch.fsutil import file_sha256

PROVENANCE_FILENAME = "forkpatch-provenance.json"


sha256_file = file_sha256


@dataclass(frozen=True)
class WheelInfo:
    path: Path
    sha256: str
    name: str  # canonical distribution name, e.g. "1cat-vllm"
    version: str  # METADATA's Version (what importlib.metadata reports)
    tags: str  # "py3-none-any"
    requires: tuple[str, ...] = ()
    provenance_bytes: bytes | None = field(default=None, repr=False)
    #: Top-level import names the wheel installs ("vllm", "_1cat_vllm_dist_alias", ...).
    top_level: tuple[str, ...] = ()

    @property
    def provenance_sha256(self) -> str | None:
        if self.provenance_bytes is None:
            return None
        return hashlib.sha256(self.provenance_bytes).hexdigest()

    def provenance(self) -> dict[str, Any] | None:
        import json

        if self.provenance_bytes is None:
            return None
        try:
            data = json.loads(self.provenance_bytes)
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.path.name,
            "sha256": self.sha256,
            "name": self.name,
            "version": self.version,
            "size": self.path.stat().st_size,
        }


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
            meta = BytesHeaderParser().parsebytes(zf.read(f"{di}/METADATA"))
            prov_name = f"{di}/{PROVENANCE_FILENAME}"
            prov = zf.read(prov_name) if prov_name in names else None
    except (zipfile.BadZipFile, KeyError, OSError) as exc:
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
        sha256=sha256_file(path),
        name=str(name),
        version=str(meta.get("Version") or ""),
        tags=tags,
        requires=tuple(meta.get_all("Requires-Dist") or ()),
        provenance_bytes=prov,
        top_level=_top_level(names),
    )


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


def dist_names(wheel_names: Iterable[str]) -> list[str]:
    out = []
    for n in wheel_names:
        try:
            out.append(str(parse_wheel_filename(n)[0]))
        except InvalidWheelFilename:
            continue
    return out
