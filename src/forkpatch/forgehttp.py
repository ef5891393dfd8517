"""A small, bounded HTTP GET for forge APIs (GitHub, GitLab): JSON answers only.

Bounded in size (:data:`MAX_BODY`), time (one deadline for the whole request,
redirects included) and redirects (:data:`MAX_REDIRECTS`, same scheme, https
unless the start was a loopback http URL; the credential header is dropped when a
redirect leaves the host). The token is passed in by the caller, from the
environment; it is never logged and never part of an error message. Self-contained
on purpose: it and the package index's bounded fetcher can become one module.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MAX_BODY = 1 << 20
MAX_REDIRECTS = 3
USER_AGENT = "forkpatch (forge API)"


class ForgeHTTPError(Exception):
    """The forge did not give a usable answer; ``reason`` says why, in words."""

    def __init__(self, reason: str, *, status: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


@dataclass(frozen=True)
class Answer:
    status: int
    data: Any


def _rate_limit_reason(status: int, headers: Mapping[str, str]) -> str | None:
    remaining = headers.get("x-ratelimit-remaining") or headers.get("ratelimit-remaining")
    retry = headers.get("retry-after")
    reset = headers.get("x-ratelimit-reset") or headers.get("ratelimit-reset")
    if status == 429 or (status == 403 and (remaining == "0" or retry)):
        when = ""
        if retry and retry.isdigit():
            when = f"; retry after {retry} s"
        elif reset and reset.isdigit():
            when = f"; the limit resets in {max(0, int(reset) - int(time.time()))} s"
        return f"rate limited (HTTP {status}{when})"
    return None


def get_json(
    url: str, *, headers: Mapping[str, str] | None = None, timeout_s: float = 10.0
) -> Answer:
    """GET ``url`` and parse its JSON; :class:`ForgeHTTPError` for anything else."""
    deadline = time.monotonic() + timeout_s
    send = {"Accept": "application/json", "User-Agent": USER_AGENT, **(headers or {})}
    start = urllib.parse.urlsplit(url)
    for _ in range(MAX_REDIRECTS + 1):
        parts = urllib.parse.urlsplit(url)
        loopback = parts.hostname in ("127.0.0.1", "::1", "localhost")
        if parts.scheme != "https" and not (parts.scheme == "http" and loopback):
            raise ForgeHTTPError(f"refusing a non-https URL ({parts.scheme}://{parts.hostname})")
        if parts.hostname != start.hostname:
            send = {
                k: v for k, v in send.items() if k.lower() not in ("authorization", "private-token")
            }
        left = deadline - time.monotonic()
        if left <= 0:
            raise ForgeHTTPError(f"no answer within {timeout_s:.0f} s")
        conn_cls = (
            http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        )
        conn = conn_cls(parts.hostname or "", parts.port, timeout=left)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        try:
            conn.request("GET", path or "/", headers=send)
            resp = conn.getresponse()
            lower = {k.lower(): v for k, v in resp.getheaders()}
            if resp.status in (301, 302, 303, 307, 308) and "location" in lower:
                url = urllib.parse.urljoin(url, lower["location"])
                continue
            body = b""
            while len(body) <= MAX_BODY:
                if time.monotonic() > deadline:
                    raise ForgeHTTPError(f"no answer within {timeout_s:.0f} s")
                chunk = resp.read(64 << 10)
                if not chunk:
                    break
                body += chunk
            if len(body) > MAX_BODY:
                raise ForgeHTTPError(f"the answer is larger than {MAX_BODY} bytes")
        except TimeoutError:
            raise ForgeHTTPError(f"no answer within {timeout_s:.0f} s") from None
        except (OSError, http.client.HTTPException) as exc:
            raise ForgeHTTPError(f"cannot reach {parts.hostname}: {type(exc).__name__}") from None
        finally:
            conn.close()
        limited = _rate_limit_reason(resp.status, lower)
        if limited:
            raise ForgeHTTPError(limited, status=resp.status)
        if resp.status == 404:
            raise ForgeHTTPError("not found (HTTP 404; or the token cannot see it)", status=404)
        if resp.status in (401, 403):
            raise ForgeHTTPError(
                f"not allowed (HTTP {resp.status}): check the token", status=resp.status
            )
        if resp.status != 200:
            raise ForgeHTTPError(f"HTTP {resp.status}", status=resp.status)
        try:
            return Answer(resp.status, json.loads(body))
        except ValueError:
            raise ForgeHTTPError("the answer is not JSON") from None
    raise ForgeHTTPError(f"more than {MAX_REDIRECTS} redirects")
