"""The package-index client: credentials kept to their host, answers bounded in bytes and
in time. Every server is on 127.0.0.1 and stops by itself (support.servers.HostileIndex);
what the server received is asserted on the server's side.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from forkpatch import publish
from forkpatch.errors import FetchError, PublishError
from forkpatch.fetch import Auth, Fetcher
from forkpatch.publish import IndexTarget
from support.reliability import Row
from support.servers import HostileIndex, serve_hostile

USER, PASSWORD = "publisher", "index-password-Kq7-canary"
PROJECT = "1cat-vllm"


@pytest.fixture(autouse=True)
def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TWINE_USERNAME", USER)
    monkeypatch.setenv("TWINE_PASSWORD", PASSWORD)


@pytest.fixture
def index() -> Iterator[HostileIndex]:
    with serve_hostile(HostileIndex()) as h:
        yield h


@pytest.fixture
def other() -> Iterator[HostileIndex]:
    """A second server: another origin (another port)."""
    with serve_hostile(HostileIndex()) as h:
        yield h


def test_credentials_do_not_follow_a_redirect_to_another_host(
    index: HostileIndex, other: HostileIndex
) -> None:
    index.mode, index.where, index.redirect_to = "redirect", "/simple/", other.url
    found = IndexTarget(index.url, None, timeout_s=10).existing(PROJECT)
    assert list(found) == ["x-1-py3-none-any.whl"]
    assert other.seen, "the redirect was not followed"
    assert other.authorizations() == [None] * len(other.seen)  # nothing reached the other host
    assert all(index.authorizations())  # the index itself got them on every request


def test_credentials_follow_a_redirect_on_the_same_host(index: HostileIndex) -> None:
    index.mode, index.where, index.redirect_to = "redirect", "/simple/", index.url + "landed"
    IndexTarget(index.url, None, timeout_s=10).existing(PROJECT)
    landed = [auth for path, auth in index.seen if path.startswith("/landed")]
    assert landed and all(landed)


def test_credentials_come_back_on_a_redirect_back_to_their_host(
    index: HostileIndex, other: HostileIndex
) -> None:
    """index -> other -> index/landed: the other host never sees them, the index does."""
    index.mode, index.where, index.redirect_to = "redirect", "/simple/", other.url
    other.mode, other.where, other.redirect_to = "redirect", "/simple/", index.url + "landed"
    IndexTarget(index.url, None, timeout_s=10).existing(PROJECT)
    assert other.authorizations() == [None] * len(other.seen)
    assert next(a for p, a in index.seen if p.startswith("/landed")) is not None


# (where the index misbehaves, how, limits lowered for the test, what the error says)
BOUNDS: dict[str, tuple[str, str, dict[str, int], str]] = {
    "an endless index page": ("/simple/", "endless", {}, "more than 16777216 bytes"),
    "an endless linked file": ("/files/", "endless", {"FILE_LIMIT": 1 << 20}, "more than"),
    "a huge Content-Length on a page": ("/simple/", "huge-length", {}, "announces"),
    "a huge Content-Length on a linked file": ("/files/", "huge-length", {}, "announces"),
    "a page trickling one byte per 0.5 s": ("/simple/", "trickle", {}, "did not answer in time"),
    "a linked file trickling": ("/files/", "trickle", {}, "did not answer in time"),
}
DEADLINE_S = 2.0


@pytest.mark.parametrize("case", list(BOUNDS))
def test_every_answer_is_bounded(
    index: HostileIndex, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    where, mode, limits, message = BOUNDS[case]
    for name, value in limits.items():
        monkeypatch.setattr(publish, name, value)
    index.mode, index.where = mode, where
    start = time.monotonic()
    with pytest.raises(PublishError, match=message) as info:
        IndexTarget(index.url, None, timeout_s=DEADLINE_S).existing(PROJECT)
    assert time.monotonic() - start < DEADLINE_S + 1.5
    assert "nothing was uploaded" in str(info.value)
    assert PASSWORD not in str(info.value) and index.url.rstrip("/") in str(info.value)


def test_one_deadline_for_the_whole_command(index: HostileIndex) -> None:
    """Each request within its own deadline, the command's runs out first."""
    index.mode, index.where = "trickle", "/files/"
    fetcher = Fetcher.for_command("publish", request_s=30, command_s=1.5)
    start = time.monotonic()
    assert fetcher.get(index.url + "simple/", limit=1 << 20)  # fine, quick
    with pytest.raises(FetchError, match=r"publish ran out of time"):
        fetcher.get(index.url + "files/x.whl", limit=1 << 20)
    assert time.monotonic() - start < 3.0


def test_the_error_names_the_url_without_credentials(index: HostileIndex) -> None:
    index.mode, index.where = "trickle", "/"
    url = index.url.replace("http://", f"http://{USER}:{PASSWORD}@") + "simple/"
    with pytest.raises(FetchError) as info:
        Fetcher.for_command("publish", request_s=1, command_s=1).get(url, limit=1 << 20)
    assert PASSWORD not in str(info.value) and index.url in str(info.value)


@pytest.mark.parametrize("mode", ["endless", "huge-length", "trickle"])
def test_a_download_streams_to_disk_and_leaves_nothing_when_refused(
    index: HostileIndex, tmp_path: Path, mode: str
) -> None:
    index.mode, index.where = mode, "/files/"
    dest = tmp_path / "x-1-py3-none-any.whl"
    with pytest.raises(FetchError):
        Fetcher.for_command("the download", request_s=1.5, command_s=1.5).download(
            index.url + "files/x-1-py3-none-any.whl", dest, limit=1 << 20
        )
    assert list(tmp_path.iterdir()) == []
    index.mode = "page"
    Fetcher.for_command("the download", request_s=5, command_s=5).download(
        index.url + "files/x-1-py3-none-any.whl", dest, limit=1 << 20
    )
    assert dest.read_bytes() == b"wheel bytes"


def test_credentials_are_sent_only_to_their_origin(
    index: HostileIndex, other: HostileIndex
) -> None:
    auth = Auth("Basic c2VjcmV0", for_url=index.url)
    fetcher = Fetcher.for_command("publish", request_s=5, command_s=5, auth=auth)
    fetcher.get(other.url + "simple/", limit=1 << 20)
    fetcher.get(index.url + "simple/", limit=1 << 20)
    assert other.authorizations() == [None] and index.authorizations() == ["Basic c2VjcmV0"]


RELIABILITY = [
    Row(
        "package index",
        "credentials and redirects: to another host, on the same host, back to the index; "
        "a request to another host",
        "4 cases",
        "the credentials reach only the host they were given for (asserted on the servers)",
    ),
    Row(
        "package index",
        "answers that never end, announce a huge length or trickle one byte per 0.5 s, on "
        "index pages, linked files and downloads; one deadline for the whole command",
        f"{len(BOUNDS)} + 3 downloads + 2",
        f"refused within the deadline ({DEADLINE_S:.0f} s + 1.5) or the byte limit, naming "
        "the URL without credentials; a refused download leaves no file",
        refused=str(len(BOUNDS) + 5),
    ),
]
