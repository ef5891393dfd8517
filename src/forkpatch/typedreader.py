"""Typed access to the data of a file forkpatch wrote and reads back, validated.

A state file (a cache, a wheel's provenance, a journal) is JSON that something else may
have written or damaged: :class:`TypedReader` gives each of its values back as the type
the code reads it as (a string, a commit id, a sha256, a number, a list, a word of a
closed set), or refuses it with an error that names the
file and the place in it (``patches[2]: 'sha256' must be a sha256 hex digest``). One
reader, so that each file's loader says what it expects and nothing more.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import TypeVar

from forkpatch.errors import ForkpatchError, StateError
from forkpatch.fsutil import check_relpath
from forkpatch.kinds import word_of

T = TypeVar("T")
W = TypeVar("W", bound=str)

_OID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
#: What a plain value may be at most (a name, an id, a URL, a reason).
TEXT_LIMIT = 4096


#: How a message names the type a value must have.
_KIND_WORDS: Mapping[type, str] = {
    str: "a string",
    int: "a whole number",
    float: "a number",
    bool: "true or false",
    list: "a list",
    dict: "an object",
}


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class TypedReader:
    """The values of one file's data, typed; every refusal names the file and the place.

    ``source`` names the file (a path, or ``wheel.whl: forkpatch-provenance.json``);
    ``error`` is the error class the caller's stage raises, with ``tip`` on each."""

    def __init__(
        self, source: str, *, error: type[ForkpatchError] = StateError, tip: str | None = None
    ) -> None:
        self.source = source
        self.error = error
        self.tip = tip

    def fail(self, where: str, what: str) -> ForkpatchError:
        """The error for ``what`` is wrong at ``where`` (a key path; "" for the top)."""
        place = f"{self.source}: {where}" if where else self.source
        return self.error(f"{place}: {what}", tip=self.tip)

    def mapping(
        self,
        value: object,
        where: str,
        *,
        keys: Collection[str] | None = None,
        required: Collection[str] = (),
    ) -> Mapping[str, object]:
        """``value`` as an object; with ``keys``, none but those, and every one of
        ``required``."""
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise self.fail(where, f"expected an object, got {type(value).__name__}")
        if keys is not None:
            unknown = sorted(set(value) - set(keys))
            if unknown:
                raise self.fail(where, f"unknown key(s) {', '.join(unknown)}")
        missing = [k for k in required if k not in value]
        if missing:
            raise self.fail(where, f"missing key(s) {', '.join(sorted(missing))}")
        return value

    def field(self, data: Mapping[str, object], key: str, kind: type[T], where: str) -> T:
        """``data[key]``, an instance of ``kind`` (a bool is not a number)."""
        if key not in data:
            raise self.fail(where, f"'{key}' is missing")
        value = data[key]
        if not isinstance(value, kind) or (kind in (int, float) and isinstance(value, bool)):
            raise self.fail(
                where,
                f"'{key}' must be {_KIND_WORDS.get(kind, kind.__name__)}, found {_shown(value)}",
            )
        return value

    def text(self, data: Mapping[str, object], key: str, where: str) -> str:
        """A plain string: at most :data:`TEXT_LIMIT` characters, no NUL."""
        value = self.field(data, key, str, where)
        if len(value) > TEXT_LIMIT or "\0" in value:
            raise self.fail(where, f"'{key}' is not a plain value")
        return value

    def maybe_text(self, data: Mapping[str, object], key: str, where: str) -> str | None:
        """A plain string, or None where the key is absent or null."""
        return None if data.get(key) is None else self.text(data, key, where)

    def oid(self, data: Mapping[str, object], key: str, where: str) -> str:
        """A full commit id (40 hex digits, or 64 in a SHA-256 repository)."""
        value = self.text(data, key, where)
        if not _OID.fullmatch(value):
            raise self.fail(where, f"'{key}' is not a commit id: {_shown(value)}")
        return value

    def sha256(self, data: Mapping[str, object], key: str, where: str) -> str:
        """A sha256 hex digest (64 lower-case hex digits)."""
        value = self.maybe_sha256(data, key, where)
        if value is None:
            raise self.fail(where, f"'{key}' is missing")
        return value

    def maybe_sha256(self, data: Mapping[str, object], key: str, where: str) -> str | None:
        """A sha256 hex digest, or None where the key is absent or null."""
        value = self.maybe_text(data, key, where)
        if value is not None and not _SHA256.fullmatch(value):
            raise self.fail(where, f"'{key}' must be a sha256 hex digest, found {_shown(value)}")
        return value

    def relpath(self, value: object, where: str) -> str:
        """A relative POSIX path inside the tree it names a file of (no ``..``, not
        absolute, no NUL; :func:`forkpatch.fsutil.check_relpath`)."""
        try:
            return check_relpath(value, where=where)
        except ForkpatchError as exc:
            raise self.error(f"{self.source}: {exc.message}", tip=self.tip) from None

    def number(self, data: Mapping[str, object], key: str, where: str) -> int:
        """A whole number (not a bool)."""
        return self.field(data, key, int, where)

    def maybe_number(self, data: Mapping[str, object], key: str, where: str) -> int | None:
        """A whole number, or None where the key is absent or null."""
        return None if data.get(key) is None else self.number(data, key, where)

    def items(
        self, data: Mapping[str, object], key: str, where: str, *, optional: bool = False
    ) -> list[object]:
        """A list (``optional``: an absent key is an empty one)."""
        if optional and key not in data:
            return []
        return self.field(data, key, list, where)

    def strings(
        self,
        data: Mapping[str, object],
        key: str,
        where: str,
        *,
        optional: bool = False,
        limit: int = TEXT_LIMIT,
    ) -> tuple[str, ...]:
        """A list of plain strings, each at most ``limit`` characters (``optional``: an
        absent key is an empty one)."""
        out = []
        for i, v in enumerate(self.items(data, key, where, optional=optional)):
            if not isinstance(v, str) or len(v) > limit or "\0" in v:
                raise self.fail(f"{where}.{key}[{i}]", f"expected a string, found {_shown(v)}")
            out.append(v)
        return tuple(out)

    def numbers(self, data: Mapping[str, object], key: str, where: str) -> tuple[int, ...]:
        """A list of whole numbers."""
        out = []
        for i, v in enumerate(self.items(data, key, where)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise self.fail(f"{where}.{key}[{i}]", f"expected a number, found {_shown(v)}")
            out.append(v)
        return tuple(out)

    def text_map(self, data: Mapping[str, object], key: str, where: str) -> dict[str, str]:
        """An object of plain strings (absent or null: empty)."""
        if data.get(key) is None:
            return {}
        raw = self.mapping(data[key], f"{where}.{key}" if where else key)
        return {k: self.text(raw, k, f"{where}.{key}" if where else key) for k in raw}

    def word(self, data: Mapping[str, object], key: str, words: tuple[W, ...], where: str) -> W:
        """One of ``words`` (a closed set of kinds.py)."""
        value = self.field(data, key, str, where)
        word = word_of(value, words)
        if word is not None:
            return word
        raise self.fail(where, f"'{key}' is {_shown(value)}, not one of {', '.join(words)}")
