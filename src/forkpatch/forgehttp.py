"""Forge API answers (GitHub, GitLab) through the one HTTP client, :mod:`forkpatch.fetch`.

The client bounds the body (:data:`MAX_BODY`), the time (a deadline per request and
one per command) and redirects, and sends the token only to its own origin. This
module turns its answers into JSON and its failures into a reason in words for
``status --upstream`` (never an error of the command); the token is never part of one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from forkpatch.errors import FetchError
from forkpatch.fetch import Auth, Fetcher

MAX_BODY = 1 << 20


class ForgeHTTPError(Exception):
    """The forge did not give a usable answer; ``reason`` says why, in words."""

    def __init__(self, reason: str, *, status: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


@dataclass(frozen=True)
class Answer:
    data: Any


def _reason(exc: FetchError) -> str:
    status = exc.status
    if status == 429:
        return "rate limited (HTTP 429)"
    if status == 403:
        return "HTTP 403: rate limited, or the token may not see it"
    if status == 404:
        return "not found (HTTP 404; or the token cannot see it)"
    if status == 401:
        return "not allowed (HTTP 401): check the token"
    if status is not None:
        return f"HTTP {status}"
    text = str(exc).splitlines()[0]
    if "did not answer in time" in text:
        return "no answer in time"
    return text


def get_json(
    url: str,
    *,
    token: str | None = None,
    timeout_s: float = 10.0,
    headers: Mapping[str, str] | None = None,
) -> Answer:
    """GET ``url`` (the token as a bearer credential, for that origin only) and parse its
    JSON; :class:`ForgeHTTPError` with the reason for anything else."""
    auth = Auth(f"Bearer {token}", url) if token else None
    fetcher = Fetcher.for_command(
        "status --upstream", request_s=timeout_s, command_s=timeout_s, auth=auth
    )
    send = {"Accept": "application/json", **(headers or {})}
    try:
        body = fetcher.get(url, limit=MAX_BODY, headers=send)
    except FetchError as exc:
        raise ForgeHTTPError(_reason(exc), status=exc.status) from None
    try:
        return Answer(json.loads(body))
    except ValueError:
        raise ForgeHTTPError("the answer is not JSON") from None
