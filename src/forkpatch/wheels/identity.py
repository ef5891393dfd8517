"""What a built wheel *is*: its version label and its provenance record.

The version of a patched wheel is the fork's own version plus a PEP 440 local
label naming the patch set: ``1.2.1+fp.<hash10>`` (``1.2.1+cu128.fp.<hash10>``
when the fork version already carries a local part). The hash covers the base
commit and every patch's name and bytes, in series order, so the same series
on the same base always gives the same version, and any change gives another.

The provenance (``<dist-info>/forkpatch-provenance.json``, listed in RECORD)
says where the wheel came from in enough detail to check it against a series
later (:func:`forkpatch.wheels.verify.matches_series`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from packaging.version import InvalidVersion, Version

from forkpatch.errors import BuildError
from forkpatch.redact import strip_url_credentials

__all__ = [
    "LABEL_LENGTH",
    "PROVENANCE_FILENAME",
    "BuilderInfo",
    "PatchRecord",
    "Provenance",
    "build_version",
    "patchset_label",
    "sha256_hex",
]

LABEL_LENGTH = 10
PROVENANCE_FILENAME = "forkpatch-provenance.json"
_SCHEMA = 1
_LABEL_RE = re.compile(r"^[0-9a-z]+$")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def patchset_label(base_commit: str, patch_items: Sequence[tuple[str, bytes]]) -> str:
    """Short, order-sensitive hash of the base commit and the patches' names and bytes.

    Each field is length-prefixed, so no two different inputs can serialise
    the same way (``("ab", b"c")`` vs ``("a", b"bc")``).
    """
    if not base_commit:
        raise BuildError("patchset_label needs the base commit id")
    h = hashlib.sha256(b"forkpatch-patchset-v1\0")

    def put(b: bytes) -> None:
        h.update(len(b).to_bytes(8, "big"))
        h.update(b)

    put(base_commit.strip().lower().encode("ascii"))
    h.update(len(patch_items).to_bytes(8, "big"))
    for name, content in patch_items:
        put(name.encode("utf-8"))
        put(bytes(content))
    label = h.hexdigest()[:LABEL_LENGTH]
    if label.isdigit():
        # PEP 440 normalises an all-digit local segment as a number ("0123" ->
        # "123"), which would change the label inside the version. ~1% of
        # hashes look like that; force a hex letter in front.
        label = "f" + label[1:]
    return label


def build_version(fork_version: str, label: str) -> str:
    """``1.2.1`` + ``abc…`` -> ``1.2.1+fp.abc…``; ``1.2.1+cu128`` -> ``1.2.1+cu128.fp.abc…``.

    The result is in PEP 440 normal form (what wheel file names use).
    """
    if not _LABEL_RE.match(label or ""):
        raise BuildError(
            f"patch-set label {label!r} is not lowercase alphanumeric",
            tip="use the value returned by patchset_label()",
        )
    try:
        base = Version(fork_version)
    except InvalidVersion:
        raise BuildError(
            f"fork version {fork_version!r} is not a valid PEP 440 version",
            tip="check the tag / vllm/_version.py of the base",
        ) from None
    if base.local is not None and "fp" in base.local.split("."):
        raise BuildError(
            f"fork version {fork_version!r} already carries a forkpatch label",
            tip="build from the unpatched fork wheel, not from a forkpatch build",
        )
    if label.isdigit():
        raise BuildError(
            f"patch-set label {label!r} is all digits; PEP 440 would rewrite it as a number",
            tip="use the value returned by patchset_label()",
        )
    local = f"{base.local}.fp.{label}" if base.local else f"fp.{label}"
    return str(Version(f"{base.public}+{local}"))


@dataclass(frozen=True)
class PatchRecord:
    """One series entry: a patch file (``sha256`` of its bytes) or a build step."""

    name: str
    sha256: str | None = None
    build_step: str | None = None

    def __post_init__(self) -> None:
        if (self.sha256 is None) == (self.build_step is None):
            raise BuildError(
                f"provenance entry {self.name!r} needs exactly one of sha256 / build_step"
            )

    def to_dict(self) -> dict[str, str]:
        d = {"name": self.name}
        if self.sha256 is not None:
            d["sha256"] = self.sha256
        if self.build_step is not None:
            d["build_step"] = self.build_step
        return d


@dataclass(frozen=True)
class BuilderInfo:
    """How the wheel was built."""

    mode: Literal["overlay", "container"]
    image_id: str | None = None
    base_wheel_sha256: str | None = None
    build_args: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in ("overlay", "container"):
            raise BuildError(f"builder mode {self.mode!r} is neither 'overlay' nor 'container'")
        # Read-only and key-sorted: the record is a value, and its JSON is stable.
        object.__setattr__(
            self,
            "build_args",
            MappingProxyType({k: self.build_args[k] for k in sorted(self.build_args)}),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "image_id": self.image_id,
            "base_wheel_sha256": self.base_wheel_sha256,
            "build_args": dict(self.build_args),
        }


@dataclass(frozen=True)
class Provenance:
    """Where a wheel came from; stored as ``<dist-info>/forkpatch-provenance.json``."""

    fork_url: str
    tag: str
    commit: str
    patches: tuple[PatchRecord, ...]
    forkpatch_version: str
    builder: BuilderInfo
    #: sha256 (hex) of the bytes in the wheel of every file the series changed (None:
    #: the series deleted it); None for provenance written before forkpatch recorded them.
    files: Mapping[str, str | None] | None = None
    #: :func:`~forkpatch.wheels.wheelzip.record_digest` of the wheel's other members
    #: (None: written before forkpatch recorded it)
    members_sha256: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "patches", tuple(self.patches))
        if self.files is not None:
            object.__setattr__(
                self, "files", MappingProxyType({k: self.files[k] for k in sorted(self.files)})
            )
        # A wheel never records a password or token (older builds might have: drop it).
        if isinstance(self.fork_url, str):
            object.__setattr__(self, "fork_url", strip_url_credentials(self.fork_url))

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": _SCHEMA,
            "fork_url": self.fork_url,
            "tag": self.tag,
            "commit": self.commit,
            "patches": [p.to_dict() for p in self.patches],
            "forkpatch_version": self.forkpatch_version,
            "builder": self.builder.to_dict(),
            **({} if self.files is None else {"files": dict(self.files)}),
            **({} if self.members_sha256 is None else {"members_sha256": self.members_sha256}),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes, *, source: str = "provenance") -> Provenance:
        try:
            d = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise BuildError(f"{source}: not valid JSON ({exc})") from None
        try:
            _check_keys(
                d,
                {
                    "schema",
                    "fork_url",
                    "tag",
                    "commit",
                    "patches",
                    "forkpatch_version",
                    "builder",
                    "files",
                    "members_sha256",
                },
                source,
                required={
                    "schema",
                    "fork_url",
                    "tag",
                    "commit",
                    "patches",
                    "forkpatch_version",
                    "builder",
                },
            )
            if d["schema"] != _SCHEMA:
                raise BuildError(
                    f"{source}: provenance schema {d['schema']!r} is not {_SCHEMA}",
                    tip="upgrade forkpatch to read this wheel's provenance",
                )
            patches = []
            for i, p in enumerate(d["patches"]):
                _check_keys(
                    p,
                    {"name", "sha256", "build_step"},
                    f"{source}: patches[{i}]",
                    required={"name"},
                )
                try:
                    patches.append(PatchRecord(p["name"], p.get("sha256"), p.get("build_step")))
                except BuildError as exc:
                    raise BuildError(f"{source}: patches[{i}]: {exc.message}") from None
            b = d["builder"]
            _check_keys(
                b,
                {"mode", "image_id", "base_wheel_sha256", "build_args"},
                f"{source}: builder",
                required={"mode"},
            )
            builder = BuilderInfo(
                mode=b["mode"],
                image_id=b.get("image_id"),
                base_wheel_sha256=b.get("base_wheel_sha256"),
                build_args=dict(b.get("build_args") or {}),
            )
            files = d.get("files")
            if files is not None and not (
                isinstance(files, dict)
                and all(
                    isinstance(k, str) and (v is None or (isinstance(v, str) and len(v) == 64))
                    for k, v in files.items()
                )
            ):
                raise BuildError(f"{source}: files must map paths to sha256 hex digests or null")
            members = d.get("members_sha256")
            if members is not None and not (isinstance(members, str) and len(members) == 64):
                raise BuildError(f"{source}: members_sha256 must be a sha256 hex digest")
            return cls(
                files=files,
                members_sha256=members,
                fork_url=d["fork_url"],
                tag=d["tag"],
                commit=d["commit"],
                patches=tuple(patches),
                forkpatch_version=d["forkpatch_version"],
                builder=builder,
            )
        except (TypeError, AttributeError) as exc:
            raise BuildError(f"{source}: malformed provenance ({exc})") from None


def _check_keys(d: Any, allowed: set[str], where: str, required: set[str] | None = None) -> None:
    if not isinstance(d, dict):
        raise BuildError(f"{where}: expected an object, got {type(d).__name__}")
    unknown = sorted(set(d) - allowed)
    if unknown:
        raise BuildError(f"{where}: unknown key(s) {', '.join(unknown)}")
    missing = sorted((allowed if required is None else required) - set(d))
    if missing:
        raise BuildError(f"{where}: missing key(s) {', '.join(missing)}")
