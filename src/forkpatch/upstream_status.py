"""``forkpatch status --upstream``: what became of what each patch sent upstream.

A patch's ``upstream:`` may name a GitHub pull request, a GitLab merge request, a
commit URL, or a plain commit id of the fork. Requests are asked of the forge's REST
API (:mod:`forkpatch.forgehttp`; token from ``GITHUB_TOKEN`` / ``GITLAB_TOKEN``,
never stored or shown; API base from ``FORKPATCH_GITHUB_API`` / ``FORKPATCH_GITLAB_API``
for tests and self-hosted forges); answers are cached in ``.forkpatch/upstream.json``
with the time they were fetched. For a merged request (and a commit), the fork's
release tags say which release carries the merge commit, or "not yet released".

Offline, without a token, rate limited: the last known answer with its age, or
``unknown`` with the reason. Nothing here makes ``status`` fail.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from forkpatch import log
from forkpatch.errors import ForkpatchError
from forkpatch.forgehttp import ForgeHTTPError, get_json
from forkpatch.fsutil import atomic_write
from forkpatch.project import Project
from forkpatch.series import PatchEntry

CACHE_FILE = "upstream.json"
STATES = ("open", "draft", "merged", "closed", "unknown")
TIMEOUT_S = float(os.environ.get("FORKPATCH_FORGE_TIMEOUT", "10"))
TOTAL_S = 30.0  # every request of one status together

_GITHUB_PR = re.compile(r"https://github\.com/([\w.-]+)/([\w.-]+)/pull/(\d+)")
_GITLAB_MR = re.compile(r"https://([\w.-]+)/((?:[\w.-]+/)+[\w.-]+)/-/merge_requests/(\d+)")
_COMMIT_URL = re.compile(r"https://[\w.-]+/(?:[\w.-]+/)+(?:-/)?commit/([0-9a-f]{7,40})\b")
_COMMIT_ID = re.compile(r"(?<![0-9a-zA-Z/])([0-9a-f]{7,40})(?![0-9a-zA-Z])")


@dataclass(frozen=True)
class Reference:
    kind: str  # "github-pr" | "gitlab-mr" | "commit"
    url: str
    key: str  # the cache key
    api: str | None = None  # the API URL asked
    commit: str | None = None


def reference(entry: PatchEntry) -> Reference | None:
    """What ``upstream:`` names (None: nothing to ask)."""
    text = entry.upstream
    if m := _GITHUB_PR.search(text):
        owner, repo, number = m.groups()
        base = os.environ.get("FORKPATCH_GITHUB_API", "https://api.github.com").rstrip("/")
        return Reference(
            "github-pr", m.group(0), m.group(0), f"{base}/repos/{owner}/{repo}/pulls/{number}"
        )
    if m := _GITLAB_MR.search(text):
        host, path, iid = m.groups()
        base = os.environ.get("FORKPATCH_GITLAB_API", f"https://{host}/api/v4").rstrip("/")
        quoted = urllib.parse.quote(path, safe="")
        return Reference(
            "gitlab-mr", m.group(0), m.group(0), f"{base}/projects/{quoted}/merge_requests/{iid}"
        )
    if m := _COMMIT_URL.search(text):
        return Reference("commit", m.group(0), m.group(0), commit=m.group(1))
    if m := _COMMIT_ID.search(text):
        return Reference("commit", m.group(1), m.group(1), commit=m.group(1))
    return None


def _github(data: Mapping[str, Any]) -> tuple[str, str | None]:
    if data.get("merged") or data.get("merged_at"):
        return "merged", data.get("merge_commit_sha")
    if data.get("state") == "open":
        return ("draft" if data.get("draft") else "open"), None
    return "closed", None


def _gitlab(data: Mapping[str, Any]) -> tuple[str, str | None]:
    state = data.get("state")
    if state == "merged":
        return "merged", data.get("merge_commit_sha") or data.get("squash_commit_sha")
    if state == "opened":
        draft = data.get("draft") or data.get("work_in_progress")
        return ("draft" if draft else "open"), None
    return "closed", None  # closed, locked


def _token(ref: Reference) -> tuple[str | None, str | None]:
    """The token for ``ref``'s forge (sent as a bearer credential), or why there is none."""
    if ref.kind == "github-pr":
        token = os.environ.get("GITHUB_TOKEN") or os.environ.get("GH_TOKEN")
        return (token, None) if token else (None, "no GITHUB_TOKEN")
    token = os.environ.get("GITLAB_TOKEN")
    return (token, None) if token else (None, "no GITLAB_TOKEN")


class Cache:
    """``.forkpatch/upstream.json``: key -> {"state", "merge_commit", "fetched"}."""

    def __init__(self, project: Project) -> None:
        self.path = project.state_dir / CACHE_FILE
        self.data: dict[str, dict[str, Any]] = {}
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            if isinstance(raw, dict):
                self.data = {
                    k: v
                    for k, v in raw.items()
                    if isinstance(v, dict)
                    and v.get("state") in STATES
                    and isinstance(v.get("fetched"), (int, float))
                }
        except (OSError, ValueError):
            pass
        self.changed = False

    def put(self, key: str, state: str, merge_commit: str | None) -> None:
        self.data[key] = {"state": state, "merge_commit": merge_commit, "fetched": time.time()}
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


def upstream_states(project: Project, entries: Sequence[PatchEntry]) -> dict[str, dict[str, Any]]:
    """Each patch's ``upstream`` object for ``status --upstream``."""
    cache = Cache(project)
    releases: _Releases | None = None
    deadline = time.monotonic() + TOTAL_S
    out: dict[str, dict[str, Any]] = {}
    for entry in entries:
        ref = reference(entry)
        if ref is None:
            out[entry.name] = {
                "state": "unknown",
                "reason": "upstream: names no pull/merge request or commit"
                + (f" ({entry.upstream!r})" if entry.upstream else ""),
            }
            continue
        info: dict[str, Any] = {"url": ref.url, "kind": ref.kind}
        state, merge_commit, why = None, ref.commit, None
        if ref.api is not None:
            token, why = _token(ref)
            if why is None and time.monotonic() > deadline:
                why = f"no time left ({TOTAL_S:.0f} s for all requests)"
            if why is None:
                try:
                    left = min(TIMEOUT_S, deadline - time.monotonic())
                    data = get_json(ref.api, token=token, timeout_s=left).data
                    if not isinstance(data, dict):
                        raise ForgeHTTPError("the answer is not a JSON object")
                    state, merge_commit = (_github if ref.kind == "github-pr" else _gitlab)(data)
                    cache.put(ref.key, state, merge_commit)
                    info["age"] = "0 s"
                except ForgeHTTPError as exc:
                    why = exc.reason
            if state is None:
                known = cache.data.get(ref.key)
                if known is not None:
                    state, merge_commit = known["state"], known.get("merge_commit")
                    info["age"] = _age(known["fetched"])
                    info["stale"] = f"last known answer ({why})"
                else:
                    out[entry.name] = {**info, "state": "unknown", "reason": why}
                    continue
        else:
            state = "merged"
        if state == "merged" and merge_commit:
            try:
                releases = releases or _Releases(project)
                carried = releases.carrying(merge_commit)
            except ForkpatchError as exc:
                carried, info["release_reason"] = None, str(exc).splitlines()[0]
            if (
                ref.kind == "commit"
                and carried is None
                and releases is not None
                and releases.fork.store.commit_of(merge_commit) is None
            ):
                out[entry.name] = {
                    **info,
                    "state": "unknown",
                    "reason": f"commit {merge_commit[:12]} is not in the fork's history",
                }
                continue
            info["merge_commit"] = merge_commit
            info["release"] = carried or "not yet released"
        out[entry.name] = {"state": state, **info}
    try:
        cache.save()
    except OSError as exc:
        log.warn(f"cannot write {cache.path}: {exc}")
    return out


def describe(name: str, up: Mapping[str, Any]) -> str:
    """One line for humans."""
    text = f"  {name}: {up['state']}"
    if up.get("url"):
        text += f" ({up['url']})"
    if up.get("release"):
        text += (
            f", {up['release'] if up['release'] == 'not yet released' else 'in ' + up['release']}"
        )
    if up.get("stale"):
        text += f"; {up['stale']}, {up.get('age')} old"
    if up.get("reason"):
        text += f": {up['reason']}"
    return text
