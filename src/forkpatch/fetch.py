"""The one HTTP client: every answer bounded in bytes and in time, credentials kept to
their host.

- **Credentials** (an ``Authorization`` header) are sent only to the origin (scheme,
  host, port) they were given for: a redirect to another origin is followed without
  them; a redirect back to it gets them again. Redirects go to http(s) only, at most
  :data:`MAX_REDIRECTS`.
- **Bytes**: a body is read up to ``limit`` bytes (a ``Content-Length`` above it is
  refused before anything is read); :func:`download` streams to a file beside its
  target, :func:`sha256` hashes while streaming, so memory stays bounded.
- **Time**: a :class:`Deadline` per request and one per command (the earlier wins);
  the body is read in pieces as they arrive, so a server that trickles one byte at a
  time is stopped at the deadline, not held per read.

Every failure is a :class:`~forkpatch.errors.FetchError` naming the URL without its
credentials, with the HTTP status when there was one.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from http.client import HTTPException, HTTPMessage, HTTPResponse
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

from forkpatch.errors import FetchError
from forkpatch.redact import strip_url_credentials as shown_url

MAX_REDIRECTS = 5
CHUNK = 1 << 16


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of ``url``, the default port filled in."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").lower(), port


@dataclass(frozen=True)
class Deadline:
    """A moment on the monotonic clock after which a request or a command gives up."""

    at: float
    what: str  # "the request" / "publish": named in the error

    @classmethod
    def after(cls, seconds: float, what: str) -> Deadline:
        return cls(time.monotonic() + seconds, what)

    def left(self) -> float:
        return self.at - time.monotonic()

    def sooner(self, other: Deadline | None) -> Deadline:
        return self if other is None or self.at <= other.at else other


@dataclass(frozen=True)
class Auth:
    """An ``Authorization`` header value and the URL whose origin it belongs to."""

    header: str
    for_url: str


class _Redirects(urllib.request.HTTPRedirectHandler):
    max_redirections = MAX_REDIRECTS

    def __init__(self, auth: Auth | None) -> None:
        self.auth = auth

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        if urlsplit(newurl).scheme.lower() not in ("http", "https"):
            raise FetchError(
                f"{shown_url(req.full_url)} redirects to {shown_url(newurl)}, not an http(s) URL",
                tip="check the URL; forkpatch follows redirects to http(s) only",
            )
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None:
            new.remove_header("Authorization")
            if self.auth is not None and origin(newurl) == origin(self.auth.for_url):
                new.add_unredirected_header("Authorization", self.auth.header)
        return new


@contextlib.contextmanager
def _open(
    url: str,
    *,
    deadline: Deadline,
    auth: Auth | None,
    headers: Mapping[str, str],
    read_timeout: float,
) -> Iterator[HTTPResponse]:
    left = deadline.left()
    if left <= 0:
        raise _late(url, deadline)
    req = urllib.request.Request(url, headers=dict(headers))
    if auth is not None and origin(url) == origin(auth.for_url):
        req.add_unredirected_header("Authorization", auth.header)
    opener = urllib.request.build_opener(_Redirects(auth))
    try:
        resp = opener.open(req, timeout=max(0.05, min(read_timeout, left)))
    except urllib.error.HTTPError as exc:
        exc.close()
        raise FetchError(
            f"{shown_url(exc.geturl() or url)} answered HTTP {exc.code}", status=exc.code
        ) from None
    except (urllib.error.URLError, HTTPException, OSError) as exc:
        if deadline.left() <= 0 or isinstance(getattr(exc, "reason", exc), socket.timeout):
            raise _late(url, deadline) from None
        reason = getattr(exc, "reason", exc)
        raise FetchError(f"cannot reach {shown_url(url)}: {reason}") from None
    try:
        yield resp
    finally:
        resp.close()


def _late(url: str, deadline: Deadline) -> FetchError:
    return FetchError(
        f"{shown_url(url)} did not answer in time ({deadline.what} ran out of time)",
        tip="is the server up and answering? run again later, or raise the timeout",
    )


def _pieces(resp: HTTPResponse, url: str, *, limit: int, deadline: Deadline) -> Iterator[bytes]:
    """The body as it arrives, refusing past ``limit`` bytes or past the deadline."""
    declared = resp.headers.get("Content-Length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise _too_big(url, limit, declared=int(declared))
    total = 0
    while True:
        if deadline.left() <= 0:
            raise _late(url, deadline)
        try:
            piece = resp.read1(CHUNK)
        except (HTTPException, OSError) as exc:
            if deadline.left() <= 0 or isinstance(exc, socket.timeout):
                raise _late(url, deadline) from None
            raise FetchError(f"reading {shown_url(url)} failed: {exc}") from None
        if not piece:
            return
        total += len(piece)
        if total > limit:
            raise _too_big(url, limit)
        yield piece


def _too_big(url: str, limit: int, *, declared: int | None = None) -> FetchError:
    said = f" (it announces {declared} bytes)" if declared is not None else ""
    return FetchError(
        f"{shown_url(url)} sends more than {limit} bytes{said}: refused",
        tip="is that the right URL? an index page or a wheel is never that large",
    )


@dataclass(frozen=True)
class Fetcher:
    """Requests under one command's deadline, each with its own as well."""

    request_s: float
    command: Deadline
    auth: Auth | None = None
    read_timeout: float = 60.0

    @classmethod
    def for_command(
        cls, what: str, *, request_s: float, command_s: float, auth: Auth | None = None
    ) -> Fetcher:
        return cls(request_s, Deadline.after(command_s, what), auth, min(60.0, request_s))

    def _deadline(self) -> Deadline:
        return Deadline.after(self.request_s, "the request").sooner(self.command)

    def _each(
        self, url: str, limit: int, headers: Mapping[str, str], use: Callable[[bytes], object]
    ) -> None:
        deadline = self._deadline()
        with _open(
            url, deadline=deadline, auth=self.auth, headers=headers, read_timeout=self.read_timeout
        ) as resp:
            for piece in _pieces(resp, url, limit=limit, deadline=deadline):
                use(piece)

    def get(self, url: str, *, limit: int, headers: Mapping[str, str] | None = None) -> bytes:
        """The whole body of ``url`` (at most ``limit`` bytes)."""
        out = bytearray()
        self._each(url, limit, headers or {}, out.extend)
        return bytes(out)

    def sha256(self, url: str, *, limit: int) -> str:
        """The sha256 of the body of ``url``, hashed as it streams (bounded memory)."""
        digest = hashlib.sha256()
        self._each(url, limit, {}, digest.update)
        return digest.hexdigest()

    def download(self, url: str, dest: Path, *, limit: int) -> None:
        """Stream ``url`` into ``dest`` (through a temporary file beside it)."""
        tmp = dest.with_name(f".{dest.name}.part")
        try:
            with open(tmp, "wb") as fh:
                self._each(url, limit, {}, fh.write)
            os.replace(tmp, dest)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
