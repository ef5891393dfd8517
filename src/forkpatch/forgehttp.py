"""Forge API answers (GitHub, GitLab) through the one HTTP client, :mod:`forkpatch.fetch`.

The client bounds the body (:data:`MAX_BODY`), the time (a deadline per request and
one per command) and redirects, and sends the token only to its own origin. This
module turns its answers into JSON and its failures into a reason in words for
``status --upstream`` (never an error of the command); the token is never part of one.

An answer is trusted only as far as :func:`check_fields` says: the JSON is at most
:data:`MAX_BODY` bytes and :data:`MAX_DEPTH` levels deep, has no NaN or Infinity, and
each field the caller uses has the type (and the values) the forge documents; any
other answer is a reason ("the answer's 'merged' is a string, not a boolean"), never
a guess.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from forkpatch.errors import FetchError
from forkpatch.fetch import Auth, Fetcher

MAX_BODY = 1 << 20
MAX_DEPTH = 32
MAX_TEXT = 4096  # the longest string field used


class ForgeHTTPError(Exception):
    """The forge did not give a usable answer; ``reason`` says why, in words."""

    def __init__(self, reason: str, *, status: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


@dataclass(frozen=True)
class Answer:
    data: Any


def _reason(exc: FetchError, *, token_var: str | None = None) -> str:
    """Why a request failed, in words; ``token_var`` names the token that was *not*
    sent (an unauthenticated request), so the reason says what a token would change."""
    status = exc.status
    if status == 429:
        return "rate limited (HTTP 429)"
    if status == 403:
        if token_var:
            return f"HTTP 403: rate limited (asked without a token; {token_var} raises the limit)"
        return "HTTP 403: rate limited, or the token may not see it"
    if status == 404:
        if token_var:
            return f"not found (HTTP 404; asked without a token: a private one needs {token_var})"
        return "not found (HTTP 404; or the token cannot see it)"
    if status == 401:
        if token_var:
            return f"not allowed (HTTP 401): it needs a token ({token_var})"
        return "not allowed (HTTP 401): check the token"
    if status is not None:
        return f"HTTP {status}"
    text = str(exc).splitlines()[0]
    if "did not answer in time" in text:
        return "no answer in time"
    return text


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _too_deep(data: Any) -> bool:
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return False


def parse_json(body: bytes) -> Any:
    """``body`` as JSON: at most :data:`MAX_DEPTH` deep, NaN / Infinity refused."""
    try:
        data = json.loads(body, parse_constant=_no_constant)
    except RecursionError:
        raise ForgeHTTPError(f"the answer is nested more than {MAX_DEPTH} levels deep") from None
    except ValueError:
        raise ForgeHTTPError("the answer is not JSON") from None
    if _too_deep(data):
        raise ForgeHTTPError(f"the answer is nested more than {MAX_DEPTH} levels deep")
    return data


@dataclass(frozen=True)
class Field:
    """One field of a forge answer that forkpatch uses, as the forge documents it."""

    name: str
    kind: type  # bool or str; None (JSON null) is allowed unless ``required``
    required: bool = False
    choices: tuple[str, ...] = ()
    pattern: str | None = None  # a str value must match it whole


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def check_fields(data: Any, fields: Sequence[Field]) -> dict[str, Any]:
    """The used ``fields`` of the answer ``data`` (missing or null ones as None), each
    checked against its :class:`Field`; :class:`ForgeHTTPError` naming the first that is
    not what the forge documents."""
    if not isinstance(data, dict):
        raise ForgeHTTPError("the answer is not a JSON object")
    out: dict[str, Any] = {}
    for f in fields:
        value = data.get(f.name)
        if value is None:
            if f.required:
                raise ForgeHTTPError(f"the answer has no {f.name!r}")
            out[f.name] = None
            continue
        if type(value) is not f.kind:  # exact: True is not a number, 1 not a boolean
            want = "a boolean" if f.kind is bool else "a string"
            raise ForgeHTTPError(
                f"the answer's {f.name!r} is {_json_type(value)}, not {want}: not a known answer"
            )
        if isinstance(value, str):
            if len(value) > MAX_TEXT:
                raise ForgeHTTPError(f"the answer's {f.name!r} is longer than {MAX_TEXT}")
            if f.choices and value not in f.choices:
                raise ForgeHTTPError(f"the answer's {f.name!r} is none of {', '.join(f.choices)}")
            if f.pattern is not None and not re.fullmatch(f.pattern, value):
                raise ForgeHTTPError(f"the answer's {f.name!r} is not what the forge sends there")
        out[f.name] = value
    return out


def get_json(
    url: str,
    *,
    auth: Auth | None = None,
    timeout_s: float = 10.0,
    headers: Mapping[str, str] | None = None,
    token_var: str | None = None,
) -> Answer:
    """GET ``url`` and parse its JSON (:func:`parse_json`); :class:`ForgeHTTPError` with
    the reason for anything else. ``auth`` goes only to the origin it was configured
    for (``auth.for_url``), whatever ``url`` is and wherever it redirects;
    ``token_var`` names the token variable when none is sent, for the reasons."""
    fetcher = Fetcher.for_command(
        "status --upstream", request_s=timeout_s, command_s=timeout_s, auth=auth
    )
    send = {"Accept": "application/json", **(headers or {})}
    try:
        body = fetcher.get(url, limit=MAX_BODY, headers=send)
    except FetchError as exc:
        raise ForgeHTTPError(
            _reason(exc, token_var=None if auth else token_var), status=exc.status
        ) from None
    return Answer(parse_json(body))
