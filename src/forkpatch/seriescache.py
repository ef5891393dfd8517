"""series.yaml's kept parse: what the last full parse of exactly these bytes gave.

Every command reads series.yaml, and parsing it takes PyYAML (its import is a large
part of a short command's start-up). A full parse of a valid file is kept in
``.forkpatch/series-parsed.json`` together with the file's whole text and a stamp
of the code that parsed it (forkpatch's parser modules, PyYAML's, Python's version).
A later command takes the kept series only when the file's text is *equal* to the
kept text (not a hash or a time: the text itself) and the code is the same, and only
after the kept file passed the state-file checks (kind, version, checksum) and every
field its type check. Anything else (no file, another text, a garbled or stale file,
a parse that does not read back as the same series) is a miss: the full parser runs,
and with it every error message naming series.yaml's line. A file with an error is
never kept, so its message always comes from the parser.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from forkpatch.errors import ForkpatchError
from forkpatch.fsutil import atomic_write, dump_state, parse_state, read_regular
from forkpatch.series import BaseRef, ForkInfo, PatchEntry, Series, note_parsed

CACHE_FILE = "series-parsed.json"
_KIND = "series-parsed"
_VERSION = 1
# Bounded like series.yaml itself (fsutil's limit), with room for the parsed form.
_LIMIT = 32 << 20

# The forkpatch modules whose code decides what a text parses to: series.py and what
# it imports (tests/codebase/test_startup_imports.py holds the list to the import graph).
PARSER_MODULES = (
    "series",
    "sections",
    "checkids",
    "kinds",
    "redact",
    "fsutil",
    "errors",
    "settings",
)

_STR, _OPT, _STRS, _BOOL, _INT = "str", "str|None", "list[str]", "bool", "int"
ENTRY_FIELDS = {
    "name": _STR,
    "summary": _STR,
    "file": _OPT,
    "build_step": _OPT,
    "why": _STR,
    "upstream": _STR,
    "origin": _STR,
    "upstream_commits": _STRS,
    "smoke": _STRS,
    "drop_when": _STR,
    "drop_when_passes_without": _STRS,
    "drop_when_upstreamed": _BOOL,
    "line": _INT,
}
"""PatchEntry's fields and their JSON types (a test holds them equal to the class's)."""


def code_stamp() -> list[list[object]]:
    """What the parse depends on besides the text: the parser modules' files (size,
    mtime), PyYAML's package file and Python's version."""
    here = Path(__file__).parent
    stamp: list[list[object]] = [[sys.version, sys.implementation.name]]
    for name in PARSER_MODULES:
        stamp.append([name, *_stat(here / f"{name}.py")])
    stamp.append(["yaml", *_stat(_yaml_file())])
    return stamp


def _yaml_file() -> str | None:
    """PyYAML's ``__init__.py``, found without importing it (nor importlib.util: the
    path finder is what the interpreter's start already loaded)."""
    from importlib.machinery import PathFinder

    try:
        spec = PathFinder.find_spec("yaml")
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None else None


def _stat(path: Path | str | None) -> list[object]:
    if path is None:
        return [None]
    try:
        st = os.stat(path)
    except OSError:
        return [None]
    return [str(path), st.st_size, st.st_mtime_ns]


def cached_series(data: bytes, state_dir: Path) -> Series | None:
    """The series ``data`` (series.yaml's bytes) parses to, when the kept parse is of
    exactly this text with the same code; None otherwise (parse it)."""
    path = state_dir / CACHE_FILE
    try:
        text = data.decode("utf-8")
        raw = read_regular(path, follow=False, limit=_LIMIT)
        doc = parse_state(raw, path=path, kind=_KIND, version=_VERSION)
    except (OSError, UnicodeDecodeError, ForkpatchError):  # absent, garbled, not ours
        return None
    stamp = code_stamp()
    if not _known(stamp) or doc.get("text") != text or doc.get("code") != _jsonable(stamp):
        return None
    series = series_from_json(doc.get("series"))
    if series is not None:
        note_parsed(text, series)
    return series


def keep_series(data: bytes, series: Series, state_dir: Path) -> None:
    """Keep ``series`` as the parse of ``data``, when it reads back as the same series
    (a series that does not, say a section this form cannot hold, is never kept).
    Only into an existing state directory; a read-only project keeps nothing."""
    stamp = code_stamp()
    if not state_dir.is_dir() or not _known(stamp):
        return
    form = series_to_json(series)
    if series_from_json(form) != series:
        return
    with contextlib.suppress(OSError, UnicodeDecodeError):
        doc = {"text": data.decode("utf-8"), "code": _jsonable(stamp), "series": form}
        # A cache: checksummed, and parsed again when it does not read back.
        atomic_write(state_dir / CACHE_FILE, dump_state(_KIND, _VERSION, doc), durable=False)


def _known(stamp: list[list[object]]) -> bool:
    """Whether every file of the stamp was found: code that is not in plain files (a
    zip) has no stamp that would change with it, so nothing is kept for it."""
    return all(row[1] is not None for row in stamp[1:])


def _jsonable(stamp: list[list[object]]) -> list[list[object]]:
    return [list(row) for row in stamp]


def series_to_json(series: Series) -> dict[str, Any]:
    """A series as plain JSON data (what :func:`series_from_json` reads)."""
    patches = []
    for p in series.patches:
        entry: dict[str, Any] = {}
        for key in ENTRY_FIELDS:
            value = getattr(p, key)
            entry[key] = list(value) if isinstance(value, tuple) else value
        patches.append(entry)
    sections: dict[str, Any] = {}
    for name, cfg in series.sections.items():
        sections[name] = cfg.as_mapping() if hasattr(cfg, "as_mapping") else dict(cfg)
    return {
        "version": series.version,
        "header_comment": series.header_comment,
        "fork": [series.fork.name, series.fork.url, series.fork.distribution],
        "base": [series.base.tag, series.base.commit, series.base.branch],
        "patches": patches,
        "sections": sections,
    }


def series_from_json(form: object) -> Series | None:
    """The series of :func:`series_to_json`'s data; None for anything not of that
    shape (a field missing or of another type)."""
    if not isinstance(form, dict) or set(form) != {
        "version",
        "header_comment",
        "fork",
        "base",
        "patches",
        "sections",
    }:
        return None
    version, header = form["version"], form["header_comment"]
    fork, base, patches, sections = form["fork"], form["base"], form["patches"], form["sections"]
    if not (
        _is(version, _INT)
        and _is(header, _STR)
        and _strings(fork, 3)
        and _strings(base, 3)
        and isinstance(patches, list)
        and isinstance(sections, dict)
    ):
        return None
    entries = []
    for item in patches:
        if not isinstance(item, dict) or set(item) != set(ENTRY_FIELDS):
            return None
        if not all(_is(item[k], kind) for k, kind in ENTRY_FIELDS.items()):
            return None
        values: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in item.items()
        }
        entries.append(PatchEntry(**values))
    try:
        return Series(
            fork=ForkInfo(*fork),
            base=BaseRef(*base),
            patches=tuple(entries),
            sections=sections,
            version=version,
            header_comment=header,
        )
    except Exception:  # a section this code no longer reads: parse the file instead
        return None


def _strings(value: object, n: int) -> bool:
    return isinstance(value, list) and len(value) == n and all(isinstance(v, str) for v in value)


def _is(value: object, kind: str) -> bool:
    if kind == _STR:
        return isinstance(value, str)
    if kind == _OPT:
        return value is None or isinstance(value, str)
    if kind == _STRS:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == _BOOL:
        return isinstance(value, bool)
    return isinstance(value, int) and not isinstance(value, bool)
