"""The overlay build: a patched wheel from the fork's released wheel in under a second.

When a patch set touches only Python files, the compiled part of the fork's
wheel is still right, so instead of a source build (tens of minutes with
CUDA) we take the released wheel, swap the changed files, and give the result
its own version and provenance. Untouched members are copied as raw
compressed bytes (:mod:`forkpatch.wheels.wheelzip`), so the cost is one file
copy, not a decompress/recompress of 80 MB.

:func:`compiled_paths_touched` decides whether overlay is valid at all: any
change to C++/CUDA sources, the build system or requirements needs the
container build. :func:`tree_path_to_wheel_path` maps fork-tree paths to
in-wheel paths (and drops tests/, docs/, ... which are not in the wheel).
"""

from __future__ import annotations

import ast
import base64
import csv
import dataclasses
import hashlib
import io
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Protocol

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from forkpatch.errors import BuildError
from forkpatch.wheels.identity import PROVENANCE_FILENAME, Provenance
from forkpatch.wheels.wheelzip import (
    DEFAULT_FILE_ATTR,
    CopyMember,
    NewMember,
    OutMember,
    WheelZip,
    ZipEntry,
    check_record,
    record_digest,
    write_zip,
)

__all__ = [
    "DEFAULT_COMPILED_PATTERNS",
    "BuildStep",
    "WheelMembers",
    "by_importance",
    "compiled_paths_touched",
    "describe_compiled",
    "dist_info_dirname",
    "overlay_wheel",
    "record_hash",
    "rewrite_metadata_version",
    "rewrite_version_file",
    "tree_path_to_wheel_path",
    "version_tuple",
    "wheel_filename",
]

#: Fork-tree paths whose change means the compiled part of the wheel is stale.
DEFAULT_COMPILED_PATTERNS: tuple[str, ...] = (
    "csrc/**",
    "cmake/**",
    "CMakeLists.txt",
    "setup.py",
    "pyproject.toml",
    "setup.cfg",
    "MANIFEST.in",
    "requirements/**",
    "flash-attention-v100/**",
    "**/*.cu",
    "**/*.cuh",
    "**/*.cpp",
    "**/*.cc",
    "**/*.c",
    "**/*.h",
    "**/*.hpp",
    "**/*.pyx",
    "**/*.pxd",
    "**/*.rs",
    "**/Cargo.toml",
    "**/*.so",
)

DEFAULT_VERSION_FILE = "vllm/_version.py"
#: Wheel signatures: invalid once we change any byte, so they are dropped.
_SIGNATURE_FILES = ("RECORD.jws", "RECORD.p7s")


# --------------------------------------------------------------------------- paths


def _glob_regex(pattern: str) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def compiled_paths_touched(
    paths: Iterable[str], patterns: Sequence[str] = DEFAULT_COMPILED_PATTERNS
) -> list[str]:
    """The paths (fork-tree relative) that match a compiled/build pattern.

    Non-empty means the overlay build is not valid for this patch set.
    Patterns are globs where ``*`` stays inside one path segment and ``**``
    spans segments (``**/*.cu`` also matches ``x.cu`` at the root).
    """
    regexes = [_glob_regex(p) for p in patterns]
    hits: list[str] = []
    for path in paths:
        p = path.lstrip("/")
        p = p.removeprefix("./")
        if any(r.match(p) for r in regexes) and path not in hits:
            hits.append(path)
    return hits


#: Top-level directories of the fork whose files are never built into the wheel.
_OUTSIDE_THE_BUILD = ("benchmarks", "tests", "examples", "docs", "tools", ".github", ".buildkite")
_COMPILED_SUFFIXES = (
    ".cu",
    ".cuh",
    ".cpp",
    ".cc",
    ".c",
    ".h",
    ".hpp",
    ".pyx",
    ".pxd",
    ".rs",
    ".so",
)
_BUILD_FILES = ("CMakeLists.txt", "setup.py", "pyproject.toml", "setup.cfg")
#: What a touched path means for the compiled part of the wheel, most important first.
IMPORTANCE = (
    "compiled into the wheel",
    "the build's configuration",
    "packaging metadata",
    "outside the build",
)


def importance(path: str) -> int:
    """How much a change to ``path`` matters for the wheel's compiled part (an index of
    :data:`IMPORTANCE`): sources compiled into it (``csrc/``, the bundled
    flash-attention, CUDA/C++ anywhere the build reads) first, then what configures the
    build (CMake, setup.py), then packaging files (MANIFEST.in, requirements), then
    files the build never reads (benchmarks, tests, examples)."""
    p = path.lstrip("/").removeprefix("./")
    parts = PurePosixPath(p).parts
    if parts and parts[0] in _OUTSIDE_THE_BUILD:
        return 3
    name = parts[-1] if parts else p
    if parts and parts[0] in ("csrc", "flash-attention-v100"):
        return 0 if name.endswith(_COMPILED_SUFFIXES) or name == "CMakeLists.txt" else 1
    if name.endswith(_COMPILED_SUFFIXES):
        return 0
    if name in _BUILD_FILES or (parts and parts[0] == "cmake") or name == "Cargo.toml":
        return 1
    return 2


def by_importance(paths: Iterable[str]) -> list[str]:
    """``paths`` ordered by :func:`importance` (stable within one kind)."""
    return sorted(paths, key=importance)


def describe_compiled(paths: Sequence[str], limit: int = 10) -> str:
    """The touched compiled/build paths for a message, most important first, grouped:
    ``compiled into the wheel: csrc/a.cu, ...; packaging metadata: MANIFEST.in``."""
    ordered = by_importance(paths)
    shown = ordered[:limit]
    groups: dict[int, list[str]] = {}
    for path in shown:
        groups.setdefault(importance(path), []).append(path)
    text = "; ".join(f"{IMPORTANCE[k]}: {', '.join(v)}" for k, v in sorted(groups.items()))
    if len(ordered) > limit:
        text += f" (and {len(ordered) - limit} more)"
    return text


def tree_path_to_wheel_path(path: str, packages: Sequence[str] = ("vllm",)) -> str | None:
    """Fork-tree path -> in-wheel path, or None for files that are not in the wheel."""
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        return None
    return p.as_posix() if p.parts[0] in packages else None


# --------------------------------------------------------------------------- wheel names


def _dist_filename_part(name: str) -> str:
    """Distribution name as wheel file/dist-info names spell it (``1cat-vllm`` -> ``1cat_vllm``)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def dist_info_dirname(name: str, version: str) -> str:
    return f"{_dist_filename_part(name)}-{version}.dist-info"


def wheel_filename(name: str, version: str, tags: str, build: str | None = None) -> str:
    mid = f"-{build}" if build else ""
    return f"{_dist_filename_part(name)}-{version}{mid}-{tags}.whl"


def record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


# --------------------------------------------------------------------------- rewrites


def rewrite_metadata_version(metadata: bytes, new_version: str, *, source: str) -> bytes:
    """Replace the ``Version:`` header of a METADATA file; keep every other byte."""
    lines = metadata.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line in (b"\n", b"\r\n"):
            break  # end of headers: the description starts here
        if line.lower().startswith(b"version:"):
            end = line[len(line.rstrip(b"\r\n")) :]
            lines[i] = b"Version: " + new_version.encode("ascii") + end
            return b"".join(lines)
    raise BuildError(
        f"{source}: no Version: header", tip="the base wheel's METADATA is malformed; rebuild it"
    )


def metadata_field(metadata: bytes, field: str) -> str | None:
    key = field.lower().encode("ascii") + b":"
    for line in metadata.splitlines():
        if not line.strip():
            return None
        if line.lower().startswith(key):
            return line[len(key) :].strip().decode("utf-8")
    return None


def version_tuple(version: str) -> tuple[int | str, ...]:
    """The tuple setuptools-scm writes for ``version`` (``_version_as_tuple``)."""
    v = Version(version)
    fields: tuple[int | str, ...] = tuple(v.release)
    if v.epoch:
        fields = (f"{v.epoch}!", *fields)
    if v.pre is not None:
        fields += (f"{v.pre[0]}{v.pre[1]}",)
    if v.post is not None:
        fields += (f"post{v.post}",)
    if v.dev is not None:
        fields += (f"dev{v.dev}",)
    if v.local is not None:
        fields += (v.local,)
    return fields


_VERSION_NAMES = {"__version__", "version"}
_TUPLE_NAMES = {"__version_tuple__", "version_tuple"}


def _str_literal(s: str, quote: str) -> str:
    text = repr(s)
    if quote == '"' and text.startswith("'") and '"' not in s:
        text = '"' + text[1:-1] + '"'
    return text


def rewrite_version_file(source: bytes, new_version: str, *, path: str) -> bytes:
    """Rewrite every version string and version tuple assigned in a setuptools-scm
    ``_version.py``, keeping the quote style and every other byte."""
    try:
        text = source.decode("utf-8")
        tree = ast.parse(text)
    except (UnicodeDecodeError, SyntaxError) as exc:
        raise BuildError(f"{path}: cannot parse ({exc})", tip="the base wheel is damaged") from None
    line_starts = [0]
    for line in text.splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(line))

    def pos(lineno: int, col: int) -> int:
        # ast columns are utf-8 byte offsets
        start = line_starts[lineno - 1]
        line_bytes = text[start : line_starts[lineno]].encode("utf-8")
        return start + len(line_bytes[:col].decode("utf-8"))

    edits: list[tuple[int, int, str]] = []
    new_tuple = version_tuple(new_version)
    # A tuple without strings (``(1, 2, 1)``) gets the quote style the file
    # uses for its version string.
    file_quote = "'"
    for node in ast.walk(tree):
        if (
            isinstance(node, (ast.Assign, ast.AnnAssign))
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            and any(
                isinstance(t, ast.Name) and t.id in _VERSION_NAMES
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            )
        ):
            first = text[pos(node.value.lineno, node.value.col_offset)]
            if first in "'\"":
                file_quote = first
                break
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        else:
            continue
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        if not names or len(names) != len(targets):
            continue
        value = node.value
        assert value is not None
        start = pos(value.lineno, value.col_offset)
        end = pos(value.end_lineno or value.lineno, value.end_col_offset or 0)
        old = text[start:end]
        quote = '"' if old.lstrip("rbuRBU").startswith('"') else "'"
        if (
            names <= _VERSION_NAMES
            and isinstance(value, ast.Constant)
            and isinstance(value.value, str)
        ):
            edits.append((start, end, _str_literal(new_version, quote)))
        elif names <= _TUPLE_NAMES and isinstance(value, ast.Tuple):
            first_str = next(
                (e for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)),
                None,
            )
            quote = file_quote
            if first_str is not None:
                s = pos(first_str.lineno, first_str.col_offset)
                quote = '"' if text[s] == '"' else "'"
            items = [repr(x) if isinstance(x, int) else _str_literal(x, quote) for x in new_tuple]
            inner = ", ".join(items) + ("," if len(items) == 1 else "")
            edits.append((start, end, f"({inner})"))
    if not edits:
        raise BuildError(
            f"{path}: no version assignment found (expected setuptools-scm's "
            "`__version__ = version = '...'`)",
            tip="pass version_file=None to skip it, or check the base wheel",
        )
    for start, end, repl in sorted(edits, reverse=True):
        text = text[:start] + repl + text[end:]
    return text.encode("utf-8")


# --------------------------------------------------------------------------- members


class WheelMembers:
    """The new wheel's members while it is being assembled (RECORD excluded).

    Build steps (:class:`BuildStep`) receive this to read, add, replace or
    delete members. Order is kept: replaced members stay in place, added ones
    are appended.
    """

    def __init__(self, source: WheelZip, *, dist_name: str, version: str, dist_info: str) -> None:
        self.source = source
        self.dist_name = dist_name  # canonical, e.g. "1cat-vllm"
        self.version = version
        self.dist_info = dist_info  # e.g. "1cat_vllm-1.2.1+fp.x.dist-info"
        self._members: dict[str, OutMember] = {}

    def names(self) -> list[str]:
        return list(self._members)

    def __contains__(self, name: object) -> bool:
        return name in self._members

    def read(self, name: str) -> bytes:
        m = self._members[name]
        return m.data if isinstance(m, NewMember) else self.source.read(m.entry)

    def put(self, name: str, data: bytes, *, executable: bool = False) -> None:
        """Add ``name`` (appended) or replace its bytes (in place, mode kept)."""
        self._check_name(name)
        old = self._members.get(name)
        if old is not None and isinstance(old, CopyMember):
            attr = old.entry.external_attr
        elif old is not None:
            attr = old.external_attr
        else:
            attr = ((0o100755 if executable else 0o100644) & 0xFFFF) << 16
        self._members[name] = NewMember(name, bytes(data), attr or DEFAULT_FILE_ATTR)

    def copy(self, entry: ZipEntry, name: str | None = None) -> None:
        self._members[name or entry.name] = CopyMember(entry, None if name == entry.name else name)

    def delete(self, name: str) -> None:
        del self._members[name]

    def ordered(self) -> list[OutMember]:
        return list(self._members.values())

    def _check_name(self, name: str) -> None:
        if name == f"{self.dist_info}/RECORD":
            raise BuildError("internal error: a build step tried to write RECORD itself")


class BuildStep(Protocol):
    """A wheel post-processing step (e.g. the vllm dist alias)."""

    __name__: str

    def __call__(self, members: WheelMembers) -> None: ...


# --------------------------------------------------------------------------- overlay


def _check_replacement_path(path: str, base: Path) -> None:
    p = PurePosixPath(path)
    bad = (
        not path
        or "\\" in path
        or "\0" in path
        or path.startswith("/")
        or re.match(r"^[A-Za-z]:", path) is not None
        or any(part in ("..", ".", "") for part in path.split("/"))
        or path.endswith("/")
    )
    if bad:
        raise BuildError(
            f"replacement path {path!r} for {base.name} is not a safe relative path inside the wheel",
            tip="replacement paths are in-wheel POSIX paths such as vllm/model_executor/x.py",
        )
    if p.parts[0].endswith(".dist-info"):
        raise BuildError(
            f"replacement path {path!r} targets the wheel's .dist-info, which forkpatch writes itself",
            tip="drop it from the patch set; METADATA, RECORD and provenance are generated",
        )


def _record_lines(record: bytes, source: str) -> dict[str, tuple[str, str]]:
    try:
        rows = list(csv.reader(io.StringIO(record.decode("utf-8"))))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise BuildError(
            f"{source}: unreadable RECORD ({exc})", tip="rebuild the base wheel"
        ) from None
    out: dict[str, tuple[str, str]] = {}
    for row in rows:
        if not row:
            continue
        if len(row) != 3:
            raise BuildError(
                f"{source}: malformed RECORD line {row!r}", tip="rebuild the base wheel"
            )
        out[row[0]] = (row[1], row[2])
    return out


_NODE_RE = re.compile(r"^g([0-9a-f]{7,40})$")


def fork_version_matches(found: str, expected: str) -> bool:
    """Whether a base wheel of version ``found`` is the fork at ``expected``: equal, or,
    for a base between releases (``1.3.1.dev8+gae13773a0dee``), the same public version
    and a ``g<commit>`` local segment naming the same commit at another length (the
    fork's own setuptools-scm abbreviates it as git does, and may add ``.empty``)."""
    try:
        have, want = Version(found), Version(expected)
    except InvalidVersion:
        return False
    if have == want:
        return True
    if have.public != want.public or not want.local or not have.local:
        return False
    nodes = [m.group(1) for part in have.local.split(".") if (m := _NODE_RE.match(part))]
    wanted = [m.group(1) for part in want.local.split(".") if (m := _NODE_RE.match(part))]
    if not nodes or not wanted:
        return False
    return any(a.startswith(b) or b.startswith(a) for a in nodes for b in wanted)


def overlay_wheel(
    base_wheel: Path,
    *,
    replacements: Mapping[str, bytes | None],
    new_version: str,
    provenance: Provenance,
    out_dir: Path,
    extra_steps: Sequence[BuildStep | Callable[[WheelMembers], None]] = (),
    expected_fork_version: str | None = None,
    version_file: str | None = DEFAULT_VERSION_FILE,
    expected_distribution: str | None = None,
) -> Path:
    """Write a patched copy of ``base_wheel`` into ``out_dir`` and return its path.

    ``replacements`` maps in-wheel paths to new bytes (``None`` deletes; a path
    not in the base adds). The .dist-info is renamed to ``new_version``,
    METADATA's ``Version:`` and ``version_file`` are rewritten, the provenance
    is added, ``extra_steps`` run, and RECORD is regenerated (RECORD last).
    Untouched members are copied as raw compressed bytes. Nothing is left in
    ``out_dir`` on error.
    """
    base_wheel = Path(base_wheel)
    out_dir = Path(out_dir)
    try:
        name, base_file_version, build_tag, _tags = parse_wheel_filename(base_wheel.name)
    except InvalidWheelFilename as exc:
        raise BuildError(
            f"{base_wheel.name} is not a wheel file name ({exc})",
            tip="pass the fork's .whl file as the base wheel",
        ) from None
    tag_part = base_wheel.name[: -len(".whl")].split("-")[-3:]
    try:
        normal = str(Version(new_version))
    except InvalidVersion:
        raise BuildError(
            f"new version {new_version!r} is not PEP 440", tip="use build_version()"
        ) from None
    if normal != new_version:
        raise BuildError(
            f"new version {new_version!r} is not in PEP 440 normal form (that would be {normal!r})",
            tip="use build_version(), which returns the normal form",
        )
    for path in replacements:
        _check_replacement_path(path, base_wheel)
    if not out_dir.is_dir():
        raise BuildError(f"output directory {out_dir} does not exist", tip="create it first")

    with WheelZip(base_wheel) as src:
        dist_infos = sorted(
            {
                e.name.split("/", 1)[0]
                for e in src.entries
                if e.name.split("/", 1)[0].endswith(".dist-info") and "/" in e.name
            }
        )
        if len(dist_infos) != 1:
            raise BuildError(
                f"{base_wheel}: expected exactly one .dist-info directory, found "
                f"{len(dist_infos)} ({', '.join(dist_infos) or 'none'})",
                tip="the base must be a wheel built by pip wheel / python -m build",
            )
        old_di = dist_infos[0]
        record_name = f"{old_di}/RECORD"
        if record_name not in src.by_name:
            raise BuildError(
                f"{base_wheel}: has no {record_name}",
                tip="a wheel without RECORD cannot be verified or uninstalled; rebuild the base wheel",
            )
        metadata_name = f"{old_di}/METADATA"
        if metadata_name not in src.by_name:
            raise BuildError(f"{base_wheel}: has no {metadata_name}", tip="rebuild the base wheel")
        metadata = src.read(metadata_name)
        base_version = metadata_field(metadata, "Version")
        meta_name = metadata_field(metadata, "Name")
        if base_version is None or meta_name is None:
            raise BuildError(
                f"{base_wheel}: {metadata_name} lacks Name or Version", tip="rebuild the base wheel"
            )
        if canonicalize_name(meta_name) != name:
            raise BuildError(
                f"{base_wheel}: METADATA names {meta_name!r}, the file name {name!r}",
                tip="the wheel was renamed by hand; use the original file",
            )
        if Version(base_version) != base_file_version:
            raise BuildError(
                f"{base_wheel}: METADATA says version {base_version}, the file name "
                f"{base_file_version}",
                tip="the wheel was renamed by hand; use the original file",
            )
        if expected_distribution is not None and canonicalize_name(meta_name) != canonicalize_name(
            expected_distribution
        ):
            raise BuildError(
                f"base wheel {base_wheel.name} is the {meta_name!r} distribution, not the "
                f"fork's {expected_distribution!r} (series.yaml fork.distribution)",
                tip=f"give --base-wheel the fork's own {expected_distribution} wheel",
            )
        if expected_fork_version is not None and not fork_version_matches(
            base_version, expected_fork_version
        ):
            raise BuildError(
                f"base wheel {base_wheel.name} is the fork's {base_version}, but the series "
                f"being built is on the fork's {expected_fork_version}",
                tip=f"pass the fork's {expected_fork_version} wheel (`forkpatch base-wheel` "
                "builds a Python-only one from the series' base)",
            )
        for path, new_bytes in replacements.items():
            if new_bytes is None and path not in src.by_name:
                raise BuildError(
                    f"a patch deletes {path}, which is not in {base_wheel.name}",
                    tip="check that the base wheel was built from the series base commit",
                )
        if version_file is not None and version_file not in src.by_name:
            raise BuildError(
                f"{base_wheel.name} has no {version_file}",
                tip="pass version_file=None if this wheel keeps its version elsewhere",
            )
        base_record = _record_lines(src.read(record_name), f"{base_wheel.name}:{record_name}")
        # Its RECORD lines are reused for the members copied as they are: they must hold.
        problems = check_record(src, record_name).problems()
        if problems:
            more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
            raise BuildError(
                f"base wheel {base_wheel}: its {record_name} does not hold: "
                + "; ".join(problems[:3])
                + more,
                tip="the base wheel is damaged or was changed after it was built: download "
                "the fork's release wheel again (`forkpatch verify` on it lists every problem)",
            )

        new_di = dist_info_dirname(name, new_version)
        members = WheelMembers(src, dist_name=str(name), version=new_version, dist_info=new_di)
        for e in src.entries:
            top, _, rest = e.name.partition("/")
            if top == old_di:
                if e.name == record_name or rest in _SIGNATURE_FILES:
                    continue
                target = f"{new_di}/{rest}"
                if e.name == metadata_name:
                    members.put(
                        target,
                        rewrite_metadata_version(
                            metadata, new_version, source=f"{base_wheel.name}:{e.name}"
                        ),
                    )
                    continue
                members.copy(e, target)
                continue
            data: bytes | None = None
            if e.name in replacements:
                data = replacements[e.name]
                if data is None:
                    continue  # deleted by the patch set
            if e.name == version_file:
                content = data if data is not None else src.read(e)
                members.put(e.name, rewrite_version_file(content, new_version, path=e.name))
            elif data is not None:
                if data == src.read(e):
                    members.copy(e)  # unchanged bytes: keep the raw member
                else:
                    members.put(e.name, data)
            else:
                members.copy(e)
        for path in sorted(p for p in replacements if p not in src.by_name):
            added = replacements[path]
            assert added is not None
            members.put(path, added)
        for step in extra_steps:
            step(members)
        if provenance.builder.mode == "overlay":
            # The bytes of every file the series changed, as they are in this wheel (a
            # container build compiled them from the series' tree instead).
            files = {
                path: hashlib.sha256(members.read(path)).hexdigest() if path in members else None
                for path in replacements
            }
            manifest = _build_record(src, members.ordered(), base_record, old_di, new_di)
            provenance = dataclasses.replace(
                provenance,
                files=files,
                members_sha256=record_digest(
                    _record_lines(manifest, "RECORD"), skip=[f"{new_di}/RECORD"]
                ),
            )
        members.put(f"{new_di}/{PROVENANCE_FILENAME}", provenance.to_json().encode("utf-8"))

        ordered = members.ordered()
        record = _build_record(src, ordered, base_record, old_di, new_di)
        new_record_name = f"{new_di}/RECORD"
        ordered.append(NewMember(new_record_name, record, DEFAULT_FILE_ATTR))

        out_name = wheel_filename(
            str(name), new_version, "-".join(tag_part), "".join(str(x) for x in build_tag) or None
        )
        dest = out_dir / out_name
        write_zip(dest, src, ordered)
    return dest


def _build_record(
    src: WheelZip,
    ordered: Sequence[OutMember],
    base_record: Mapping[str, tuple[str, str]],
    old_di: str,
    new_di: str,
) -> bytes:
    buf = io.StringIO()
    writer = csv.writer(buf, delimiter=",", quotechar='"', lineterminator="\n")
    for m in ordered:
        name = m.out_name
        if name.endswith("/"):
            continue  # directory entries are not listed in RECORD
        if isinstance(m, NewMember):
            writer.writerow((name, record_hash(m.data), str(len(m.data))))
            continue
        line = base_record.get(m.entry.name)
        if line is not None and line[0].startswith("sha256=") and line[1] == str(m.entry.file_size):
            # Raw copy: the bytes are the base's, so its RECORD line still holds.
            writer.writerow((name, line[0], line[1]))
        else:
            data = src.read(m.entry)
            writer.writerow((name, record_hash(data), str(len(data))))
    writer.writerow((f"{new_di}/RECORD", "", ""))
    return buf.getvalue().encode("utf-8")
