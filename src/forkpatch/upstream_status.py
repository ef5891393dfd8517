"""``forkpatch status --upstream``: what became of what each patch sent upstream.

A patch's ``upstream:`` may name a GitHub pull request, a GitLab merge request, a
commit URL, or a plain commit id of the fork. Requests are asked of the forge's REST
API (:mod:`forkpatch.forgehttp`); answers are cached in ``.forkpatch/upstream.json``
with the time they were fetched. For a merged request (and a commit), the fork's
release tags say which release carries the merge commit, or "not yet released".

Where a question goes and where a credential goes are decided apart:

- a patch's URL chooses *what* is asked (the owner, project and number);
- the API it is asked of is the one configured for its forge (``FORKPATCH_GITHUB_API``,
  default ``https://api.github.com``; ``FORKPATCH_GITLAB_API``, default the merge
  request's own host);
- a token (``GITHUB_TOKEN`` / ``GH_TOKEN``, ``GITLAB_TOKEN``; never stored or shown)
  goes only to the API it is configured for: GitHub's to ``FORKPATCH_GITHUB_API``,
  GitLab's to ``FORKPATCH_GITLAB_API`` or, when that is unset, to gitlab.com alone.
  A merge request on any other host is asked without it, as is every request when
  there is no token (the public API; a rate limit or a 404 says what a token would
  change). After a rate-limit answer an API is not asked again in the same run.

Answers are trusted only as their documented shape (:func:`forgehttp.check_fields`).
The cache is keyed by the API URL asked (origin and question) and read like every
state file: a regular file, bounded, each entry validated, times finite.

Offline, rate limited, or slow: the last known answer with its age, or ``unknown``
with the reason. Nothing here makes ``status`` fail.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from forkpatch import log, settings
from forkpatch.errors import ForkpatchError, InputFileError
from forkpatch.fetch import Auth, origin
from forkpatch.forgehttp import Field, ForgeHTTPError, check_fields, get_json, parse_json
from forkpatch.fsutil import atomic_write, read_regular
from forkpatch.kinds import UPSTREAM_STATES, ReferenceKind, UpstreamState
from forkpatch.project import Project
from forkpatch.series import PatchEntry, upstream_credentials

CACHE_FILE = "upstream.json"
CACHE_LIMIT = 4 << 20  # bytes: a few thousand answers
TIMEOUT_S = 10.0  # a request, unless FORKPATCH_FORGE_TIMEOUT says otherwise
TOTAL_S = 30.0  # every request of one status together
GITHUB_API = "https://api.github.com"
GITLAB_COM_API = "https://gitlab.com/api/v4"

_GITHUB_PR = re.compile(r"https://github\.com/([\w.-]+)/([\w.-]+)/pull/(\d+)")
_GITLAB_MR = re.compile(r"https://([\w.-]+)/((?:[\w.-]+/)+[\w.-]+)/-/merge_requests/(\d+)")
_COMMIT_URL = re.compile(r"https://[\w.-]+/(?:[\w.-]+/)+(?:-/)?commit/([0-9a-f]{7,40})\b")
_COMMIT_ID = re.compile(r"(?<![0-9a-zA-Z/])([0-9a-f]{7,40})(?![0-9a-zA-Z])")
_SHA = r"[0-9a-f]{40}|[0-9a-f]{64}"

# The fields used of GET /repos/{owner}/{repo}/pulls/{n} and of
# GET /projects/:id/merge_requests/:iid, as the two forges document them.
GITHUB_PR_FIELDS = (
    Field("state", str, required=True, choices=("open", "closed")),
    Field("merged", bool),
    Field("merged_at", str, pattern=r"\d{4}-\d\d-\d\dT[0-9:.]+(Z|[+-]\d\d:?\d\d)"),
    Field("merge_commit_sha", str, pattern=_SHA),
    Field("draft", bool),
)
GITLAB_MR_FIELDS = (
    Field("state", str, required=True, choices=("opened", "closed", "locked", "merged")),
    Field("merge_commit_sha", str, pattern=_SHA),
    Field("squash_commit_sha", str, pattern=_SHA),
    Field("draft", bool),
    Field("work_in_progress", bool),
)


@dataclass(frozen=True)
class Reference:
    kind: ReferenceKind
    url: str
    key: str  # the cache key: the API URL asked (its origin and the question)
    api: str | None = None  # the API URL asked
    commit: str | None = None
    auth: Auth | None = None  # the credential, for the API it is configured for only
    token_var: str = ""  # the variable a token for this API comes from


def _github_token() -> str | None:
    return os.environ.get("GITHUB_TOKEN") or os.environ.get("GH_TOKEN") or None


def _gitlab_token() -> str | None:
    return os.environ.get("GITLAB_TOKEN") or None


def _auth(token: str | None, configured: str, asked: str) -> Auth | None:
    """The token as a bearer credential, only when ``asked`` is on the API origin it is
    configured for (``configured``)."""
    if token is None or origin(asked) != origin(configured):
        return None
    return Auth(f"Bearer {token}", configured)


def reference(entry: PatchEntry) -> Reference | None:
    """What ``upstream:`` names (None: nothing to ask)."""
    text = entry.upstream
    if m := _GITHUB_PR.search(text):
        owner, repo, number = m.groups()
        base = (settings.url("FORKPATCH_GITHUB_API") or GITHUB_API).rstrip("/")
        api = f"{base}/repos/{owner}/{repo}/pulls/{number}"
        return Reference(
            "github-pr",
            m.group(0),
            api,
            api,
            auth=_auth(_github_token(), base, api),
            token_var="GITHUB_TOKEN",
        )
    if m := _GITLAB_MR.search(text):
        host, path, iid = m.groups()
        configured = settings.url("FORKPATCH_GITLAB_API")
        base = (configured or f"https://{host}/api/v4").rstrip("/")
        quoted = urllib.parse.quote(path, safe="")
        api = f"{base}/projects/{quoted}/merge_requests/{iid}"
        return Reference(
            "gitlab-mr",
            m.group(0),
            api,
            api,
            auth=_auth(_gitlab_token(), (configured or GITLAB_COM_API).rstrip("/"), api),
            token_var="GITLAB_TOKEN",
        )
    if m := _COMMIT_URL.search(text):
        return Reference("commit", m.group(0), m.group(0), commit=m.group(1))
    if m := _COMMIT_ID.search(text):
        return Reference("commit", m.group(1), m.group(1), commit=m.group(1))
    return None


def _github(data: Mapping[str, Any]) -> tuple[UpstreamState, str | None]:
    got = check_fields(data, GITHUB_PR_FIELDS)
    if got["merged"] is True or got["merged_at"] is not None:
        return "merged", got["merge_commit_sha"]
    if got["state"] == "open":
        return ("draft" if got["draft"] is True else "open"), None
    return "closed", None


def _gitlab(data: Mapping[str, Any]) -> tuple[UpstreamState, str | None]:
    got = check_fields(data, GITLAB_MR_FIELDS)
    if got["state"] == "merged":
        return "merged", got["merge_commit_sha"] or got["squash_commit_sha"]
    if got["state"] == "opened":
        draft = got["draft"] is True or got["work_in_progress"] is True
        return ("draft" if draft else "open"), None
    return "closed", None  # closed, locked


def _cache_entry(key: Any, value: Any, now: float) -> bool:
    """Whether one cache entry is what :meth:`Cache.put` writes."""
    if not (isinstance(key, str) and len(key) <= 2048 and key.startswith(("http://", "https://"))):
        return False
    if not isinstance(value, dict) or value.get("state") not in UPSTREAM_STATES:
        return False
    fetched, commit = value.get("fetched"), value.get("merge_commit")
    if not isinstance(fetched, (int, float)) or isinstance(fetched, bool):
        return False
    if not (math.isfinite(fetched) and 0 <= fetched <= now + 86400):
        return False
    if commit is not None and not (isinstance(commit, str) and re.fullmatch(_SHA, commit)):
        return False
    return type(value.get("authenticated", False)) is bool


class Cache:
    """``.forkpatch/upstream.json``: API URL -> {"state", "merge_commit", "fetched",
    "authenticated"}. A successful answer's state is the same with a token or without
    (a token changes only whether the forge answers), so one key serves both; each
    entry says which it was."""

    def __init__(self, project: Project) -> None:
        self.path = project.state_dir / CACHE_FILE
        self.data: dict[str, dict[str, Any]] = {}
        self.changed = False
        try:
            raw = read_regular(self.path, limit=CACHE_LIMIT, follow=False)
        except FileNotFoundError:
            return
        except (InputFileError, OSError) as exc:
            log.warn(f"ignoring {self.path}: {str(exc).splitlines()[0]}")
            return
        try:
            data = parse_json(raw)
        except ForgeHTTPError as exc:
            log.warn(f"ignoring {self.path}: {exc.reason.replace('the answer', 'it')}")
            return
        if not isinstance(data, dict):
            log.warn(f"ignoring {self.path}: not a JSON object")
            return
        now = time.time()
        self.data = {k: v for k, v in data.items() if _cache_entry(k, v, now)}
        if len(self.data) != len(data):
            log.warn(f"{self.path}: {len(data) - len(self.data)} damaged entries ignored")
            self.changed = True  # written back without them

    def put(
        self, key: str, state: UpstreamState, merge_commit: str | None, *, authenticated: bool
    ) -> None:
        self.data[key] = {
            "state": state,
            "merge_commit": merge_commit,
            "fetched": time.time(),
            "authenticated": authenticated,
        }
        self.changed = True

    def save(self) -> None:
        if self.changed and self.path.parent.is_dir():
            atomic_write(
                self.path, (json.dumps(self.data, indent=2, sort_keys=True) + "\n").encode()
            )


def _age(fetched: float) -> str:
    s = max(0, int(time.time() - fetched))
    for unit, n in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= n:
            return f"{s // n} {unit}"
    return f"{s} s"


class _Releases:
    """The fork's release tags (version tags, no pre-releases), oldest first, and which
    contains a commit."""

    def __init__(self, project: Project) -> None:
        from packaging.version import InvalidVersion, Version

        self.fork = project.fork()
        tags = []
        for name, commit in self.fork.source_tags().items():
            try:
                version = Version(name)  # "v1.3.0" reads as 1.3.0
            except InvalidVersion:
                continue
            if not version.is_prerelease:
                tags.append((version, name, commit))
        self.tags = sorted(tags)

    def carrying(self, commit: str) -> str | None:
        store = self.fork.store
        full = store.commit_of(commit)
        if full is None:
            return None
        for _v, name, tag_commit in self.tags:
            if store.commit_of(tag_commit) and store.is_ancestor(full, tag_commit):
                return name
        return None


@dataclass(frozen=True)
class UpstreamAnswer:
    """What became of what one patch sent upstream: its state, where it was asked, and
    (for a merged one) which release carries it; ``reason`` says why it is not known,
    ``stale`` and ``age`` that it is the last known answer."""

    state: UpstreamState
    url: str | None = None
    kind: ReferenceKind | None = None
    reason: str | None = None
    age: str | None = None
    stale: str | None = None
    merge_commit: str | None = None
    release: str | None = None
    release_reason: str | None = None

    def to_json(self) -> dict[str, object]:
        """The ``upstream`` object of ``status --upstream --json`` (its set fields)."""
        return {k: v for k, v in vars(self).items() if v is not None}

    def describe(self, name: str) -> str:
        """One line for humans."""
        text = f"  {name}: {self.state}"
        if self.url:
            text += f" ({self.url})"
        if self.release:
            released = self.release == "not yet released"
            text += f", {self.release if released else 'in ' + self.release}"
        if self.stale:
            text += f"; {self.stale}, {self.age} old"
        if self.reason:
            text += f": {self.reason}"
        return text


def upstream_states(project: Project, entries: Sequence[PatchEntry]) -> dict[str, UpstreamAnswer]:
    """Each patch's upstream answer for ``status --upstream``."""
    asking = _Asking(project)
    out = {entry.name: asking.answer(entry) for entry in entries}
    try:
        asking.cache.save()
    except OSError as exc:
        log.warn(f"cannot write {asking.cache.path}: {exc}")
    return out


class _Asking:
    """One run's questions: the cache, the time left, the APIs that rate-limited it."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self.cache = Cache(project)
        self.releases: _Releases | None = None
        self.timeout_s = settings.duration("FORKPATCH_FORGE_TIMEOUT", TIMEOUT_S)
        self.deadline = time.monotonic() + TOTAL_S
        self.limited: dict[tuple[str, str, int | None], str] = {}  # API origin -> why

    def answer(self, entry: PatchEntry) -> UpstreamAnswer:
        shown = upstream_credentials(entry.upstream)
        if shown is not None:
            return UpstreamAnswer(
                "unknown", reason=f"upstream: {shown} carries credentials; not asked (remove them)"
            )
        ref = reference(entry)
        if ref is None:
            return UpstreamAnswer(
                "unknown",
                reason="upstream: names no pull/merge request or commit"
                + (f" ({entry.upstream!r})" if entry.upstream else ""),
            )
        asked = UpstreamAnswer("merged", url=ref.url, kind=ref.kind, merge_commit=ref.commit)
        if ref.api is not None:
            asked = self._ask(ref, asked)
        if asked.state != "merged" or not asked.merge_commit:
            return replace(asked, merge_commit=None)
        return self._released(ref, asked, asked.merge_commit)

    def _ask(self, ref: Reference, asked: UpstreamAnswer) -> UpstreamAnswer:
        """The forge's answer now, else the last known one with its age, else unknown."""
        assert ref.api is not None
        why = self.limited.get(origin(ref.api))
        if why is None and time.monotonic() > self.deadline:
            why = f"no time left ({TOTAL_S:.0f} s for all requests)"
        if why is None:
            try:
                left = min(self.timeout_s, self.deadline - time.monotonic())
                data = get_json(ref.api, auth=ref.auth, timeout_s=left, token_var=ref.token_var)
                state, merge_commit = (_github if ref.kind == "github-pr" else _gitlab)(data.data)
                self.cache.put(ref.key, state, merge_commit, authenticated=ref.auth is not None)
                return replace(asked, state=state, merge_commit=merge_commit, age="0 s")
            except ForgeHTTPError as exc:
                why = exc.reason
                if exc.status == 429 or (exc.status == 403 and "rate limited" in why):
                    self.limited[origin(ref.api)] = f"{why}; not asked again in this run"
        known = self.cache.data.get(ref.key)
        if known is None:
            return replace(asked, state="unknown", reason=why, merge_commit=None)
        return replace(
            asked,
            state=known["state"],
            merge_commit=known.get("merge_commit"),
            age=_age(known["fetched"]),
            stale=f"last known answer ({why})",
        )

    def _released(self, ref: Reference, asked: UpstreamAnswer, commit: str) -> UpstreamAnswer:
        """A merged answer with the fork's release that carries ``commit``."""
        reason = None
        try:
            self.releases = self.releases or _Releases(self.project)
            carried = self.releases.carrying(commit)
        except ForkpatchError as exc:
            carried, reason = None, str(exc).splitlines()[0]
        if (
            ref.kind == "commit"
            and carried is None
            and self.releases is not None
            and self.releases.fork.store.commit_of(commit) is None
        ):
            return replace(
                asked,
                state="unknown",
                merge_commit=None,
                reason=f"commit {commit[:12]} is not in the fork's history",
                release_reason=reason,
            )
        return replace(asked, release=carried or "not yet released", release_reason=reason)
