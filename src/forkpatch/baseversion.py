"""The fork version a series' base stands for, and what to record for a rebase target.

A series is on a commit of the fork. When a release tag names that commit, the
version is the tag's (``v1.2.1`` -> ``1.2.1``). A series rebased onto a branch head
or a commit no tag names is counted from the nearest release tag below it, as
setuptools-scm (the fork's own version scheme, "guess-next-dev") counts a build
there: the release bumped, a dev segment with the distance and the commit as a
local segment (``v1.3.0`` + 8 commits -> ``1.3.1.dev8+gae13773a0dee``). Wheels,
droppable and track all read the base's version here, so they agree.

series.yaml written by an older forkpatch may name a branch or a commit id under
``base.tag``: a name that is no release tag of the fork is counted the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from forkpatch import log
from forkpatch.errors import SeriesError
from forkpatch.forkrepo import ForkRepo, ResolvedRef, order_tags
from forkpatch.series import BaseRef

#: How long the commit id in a dev version's local segment is (``+g<12 hex>``).
NODE_LENGTH = 12
DEFAULT_PATTERN = r"^v(?P<version>.+)$"

_WARNED: set[tuple[str, str]] = set()


def tag_version(tag: str, pattern: str | None = None) -> Version | None:
    """The release version a tag names (``pattern``: track.pattern, whose ``version``
    group captures it; default a ``v`` prefix, or none), None when it names none."""
    if pattern:
        m = re.match(pattern, tag)
        if not m:
            return None
        text = m.group("version") if "version" in m.re.groupindex else m.group(0)
    else:
        text = tag[1:] if tag[:1] in ("v", "V") else tag
    try:
        return Version(text)
    except InvalidVersion:
        return None


def next_dev(release: Version, distance: int, commit: str) -> str:
    """setuptools-scm's guess-next-dev: ``1.3.0``, 8, ``ae13773a...`` ->
    ``1.3.1.dev8+gae13773a0dee``: the last number of the release bumped."""
    public = release.public
    m = re.search(r"(\d+)(?!.*\d)", public)
    bumped = public if m is None else public[: m.start()] + str(int(m.group(1)) + 1)
    return str(Version(f"{bumped}.dev{distance}+g{commit[:NODE_LENGTH]}"))


@dataclass(frozen=True)
class BaseVersion:
    """The version of the fork at a series' base, and where it was counted from."""

    version: str  # PEP 440: "1.2.1", or "1.3.1.dev8+gae13773a0dee" between releases
    release_tag: str  # the release tag it counts from (the base's own tag at a release)
    distance: int  # commits from that tag to the base (0: the base is that release)

    @property
    def is_release(self) -> bool:
        return self.distance == 0

    def describe(self) -> str:
        if self.is_release:
            return self.version
        return f"{self.version} ({self.distance} commit(s) past {self.release_tag})"


def nearest_release(
    fork: ForkRepo, commit: str, pattern: str | None = None
) -> tuple[str, Version, int] | None:
    """The newest release tag at or below ``commit`` (tag, version, distance); None
    when the fork's history there holds none (no tags, or a shallow clone)."""
    best: tuple[Version, str, str] | None = None
    for tag, tagged in fork.tags_below(commit).items():
        v = tag_version(tag, pattern)
        if v is None:
            continue
        if best is None or (v, tag) > (best[0], best[1]):
            best = (v, tag, tagged)
    if best is None:
        return None
    return best[1], best[0], 0 if best[2] == commit else fork.distance(best[2], commit)


def base_version(fork: ForkRepo, base: BaseRef, pattern: str | None = None) -> BaseVersion:
    """The fork version at ``base`` (see the module docstring). Refuses, naming the
    commit and the way out, a base with no release tag at or below it."""
    if base.tag:
        v = tag_version(base.tag, pattern)
        if v is not None:
            return BaseVersion(str(v), base.tag, 0)
    found = nearest_release(fork, base.commit, pattern)
    if found is None:
        raise SeriesError(
            f"series.yaml's base {base.describe()} ({base.commit[:12]}) has no release tag "
            "at or below it in the fork's history, so it has no version to count from",
            tip=f"bring the fork's tags (`git -C {fork.source} fetch --tags`), deepen a "
            "shallow clone, or rebase the series onto a release tag",
        )
    tag, release, distance = found
    if distance == 0:
        return BaseVersion(str(release), tag, 0)
    out = BaseVersion(next_dev(release, distance, base.commit), tag, distance)
    if base.tag and (fork.source, base.tag) not in _WARNED:
        _WARNED.add((fork.source, base.tag))
        log.info(
            f"base.tag '{base.tag}' names no release; counting the version from {tag}: "
            f"{out.describe()}"
        )
    return out


def base_of_target(fork: ForkRepo, resolved: ResolvedRef) -> BaseRef:
    """What series.yaml records for a rebase onto ``resolved``: the tag given, else
    the fork's tag that names its commit (a release first), else none; and the
    branch it came from."""
    branch = resolved.name if resolved.kind in ("branch", "remote branch") else ""
    if resolved.kind == "tag":
        return BaseRef(resolved.name, resolved.commit)
    tags = order_tags(fork.tags_of(resolved.commit))
    return BaseRef(tags[0] if tags else "", resolved.commit, branch)
