"""series.yaml: the ordered patch series, validated once into frozen dataclasses.

The file is parsed with PyYAML's composer so that every error can name the
file and line. Anchors and aliases are refused outright (they are never needed
in a series and are the vehicle of "billion laughs" documents), duplicate keys
are refused (PyYAML would silently keep the last one), unknown keys get a
"did you mean" suggestion.

Writing is canonical: :func:`dump_series` always produces the same bytes for
the same series, keeps the comment block at the top of the file, and
:func:`save_series` writes atomically, so a rebase or a stack edit rewrites
only what changed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from forkpatch import checkids
from forkpatch.errors import SeriesError
from forkpatch.fsutil import atomic_write
from forkpatch.redact import CREDENTIAL_TIP, hide_url_secrets, url_has_credentials

if TYPE_CHECKING:
    import yaml

    from forkpatch.sections import (
        BuildConfig,
        PublishConfig,
        SectionConfig,
        SmokeConfig,
        TrackConfig,
        Value,
    )

# PyYAML and the typed sections load with the first series.yaml this process parses
# or writes: a command whose series.yaml is the one its kept parse was made from
# (forkpatch.seriescache) needs neither, nor does a series without sections.

_C = TypeVar("_C", bound="SectionConfig")

SERIES_FILE = "series.yaml"
PATCHES_DIR = "patches"
FORMAT_VERSION = 1

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,79}$")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")

BUILD_STEPS = ("vllm-dist-info",)
# The smoke checks a patch may name (``smoke:``), validated on load: the suite's own
# (forkpatch.smoke.incheck registers each) and the host's (forkpatch.smoke.kernels).
SMOKE_CHECKS = checkids.CHECK_IDS
HOST_SMOKE_CHECKS = checkids.HOST_CHECK_IDS


def _loader() -> Any:
    """libyaml's loader when PyYAML was built with it (5-10x faster on large series)."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


TOP_KEYS = ("version", "fork", "base", "patches", "build", "smoke", "publish", "track")
FORK_KEYS = ("name", "url", "distribution")
# ``commit`` is what the series is on; ``tag`` the fork's tag that names that commit
# (absent for a commit no tag names); ``branch`` the branch a rebase took it from,
# for the record only (the branch moves on, the series stays on the commit).
BASE_KEYS = ("tag", "commit", "branch")
PATCH_KEYS = (
    "name",
    "file",
    "build-step",
    "summary",
    "why",
    "upstream",
    "origin",
    "upstream-commits",
    "smoke",
    "drop-when",
)
# The structured form of `drop-when`: its text, and the conditions `forkpatch droppable`
# evaluates (every condition given must hold).
DROP_WHEN_KEYS = ("text", "passes-without", "upstreamed")
# An upstream commit id as `upstream-commits` holds it (abbreviated or full, SHA-1 or SHA-256).
UPSTREAM_COMMIT_RE = re.compile(r"^[0-9a-f]{7,64}$")


@dataclass(frozen=True)
class ForkInfo:
    name: str
    url: str
    distribution: str


@dataclass(frozen=True)
class BaseRef:
    """What the series is applied to: a commit of the fork, the tag that names it
    (``""`` when none does: a series rebased onto a commit or a branch head no tag
    names) and, for the record, the branch a rebase took it from."""

    tag: str
    commit: str
    branch: str = ""

    @property
    def label(self) -> str:
        """The base in messages and file names: its tag, else its commit id (12 digits)."""
        return self.tag or self.commit[:12]

    def describe(self) -> str:
        """``v1.3.0``; ``commit ae13773a0dee (branch main)``: for messages."""
        if self.tag:
            return self.tag
        return f"commit {self.commit[:12]}" + (f" (branch {self.branch})" if self.branch else "")


@dataclass(frozen=True)
class PatchEntry:
    """One patch of the series, in order. Exactly one of ``file``/``build_step``."""

    name: str
    summary: str
    file: str | None = None
    build_step: str | None = None
    why: str = ""
    upstream: str = ""
    origin: str = ""
    # Upstream commits the patch names as its source (``import`` records them; see
    # forkpatch.patchfile.upstream_refs): evidence for the rebase, never applied.
    upstream_commits: tuple[str, ...] = ()
    smoke: tuple[str, ...] = ()
    drop_when: str = ""  # the condition in words (the whole of the plain-text form)
    #: smoke checks that must pass on the series without this patch for it to be dropped
    drop_when_passes_without: tuple[str, ...] = ()
    #: the patch may be dropped once the target already contains it (upstreamed there)
    drop_when_upstreamed: bool = False
    line: int = 0  # where the entry starts in series.yaml (0: not from a file)

    @property
    def is_diff(self) -> bool:
        return self.file is not None

    @property
    def drop_condition(self) -> bool:
        """Whether ``drop-when`` says something forkpatch can evaluate."""
        return bool(self.drop_when_passes_without) or self.drop_when_upstreamed


@dataclass(frozen=True)
class Series:
    fork: ForkInfo
    base: BaseRef
    patches: tuple[PatchEntry, ...] = ()
    #: "build" / "smoke" / "publish" / "track" -> its typed, frozen section
    #: (:mod:`forkpatch.sections`); a plain mapping given here is validated into one.
    sections: Mapping[str, SectionConfig | Mapping[str, Any]] = field(default_factory=dict)
    version: int = FORMAT_VERSION
    header_comment: str = ""

    def __post_init__(self) -> None:
        if not self.sections:
            return  # nothing to type: the sections module is not needed
        from forkpatch.sections import SECTIONS, SectionConfig

        typed: dict[str, SectionConfig] = {}
        for name, value in self.sections.items():
            cls = SECTIONS.get(name)
            if cls is None:
                raise SeriesError(
                    f"{SERIES_FILE}: unknown section '{name}'{_suggest(name, SECTIONS)}",
                    tip=f"sections: {', '.join(SECTIONS)}",
                )
            if isinstance(value, cls):
                cfg = value
            else:
                data = value.as_mapping() if isinstance(value, SectionConfig) else value
                cfg = cls.from_mapping(data, at=SERIES_FILE)
            if cfg:
                typed[name] = cfg
        object.__setattr__(self, "sections", typed)

    @property
    def build(self) -> BuildConfig:
        from forkpatch.sections import BuildConfig

        return self._typed("build", BuildConfig)

    @property
    def smoke(self) -> SmokeConfig:
        from forkpatch.sections import SmokeConfig

        return self._typed("smoke", SmokeConfig)

    @property
    def publish(self) -> PublishConfig:
        from forkpatch.sections import PublishConfig

        return self._typed("publish", PublishConfig)

    @property
    def track(self) -> TrackConfig:
        from forkpatch.sections import TrackConfig

        return self._typed("track", TrackConfig)

    def _typed(self, name: str, cls: type[_C]) -> _C:
        cfg = self.sections.get(name)
        return cfg if isinstance(cfg, cls) else cls()

    def names(self) -> list[str]:
        return [p.name for p in self.patches]

    def get(self, name: str) -> PatchEntry:
        for p in self.patches:
            if p.name == name:
                return p
        raise SeriesError(
            f"no patch named '{name}' in {SERIES_FILE}{_suggest(name, self.names())}",
            tip="`forkpatch status` lists the patches",
        )

    def index(self, name: str) -> int:
        return self.names().index(self.get(name).name)

    def with_patches(self, patches: Iterable[PatchEntry]) -> Series:
        return replace(self, patches=tuple(patches))

    def with_base(self, base: BaseRef) -> Series:
        return replace(self, base=base)


# --------------------------------------------------------------------------- loading


def _suggest(word: str, candidates: Iterable[str]) -> str:
    import difflib  # only here: keeps it out of every start-up

    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


class _Loc:
    """Formats error locations as ``series.yaml:LINE``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def err(self, node: yaml.Node | None, message: str, tip: str | None = None) -> SeriesError:
        where = self.path
        if node is not None:
            where = f"{self.path}:{node.start_mark.line + 1}"
        return SeriesError(f"{where}: {message}", tip=tip or f"fix {self.path} and run again")


def _check_no_aliases(text: str, loc: _Loc) -> None:
    import yaml

    if "&" not in text and "*" not in text:
        return  # no anchor ('&') or alias ('*') indicator anywhere: nothing to find
    try:
        for event in yaml.parse(text, Loader=_loader()):
            anchor = getattr(event, "anchor", None)
            if isinstance(event, yaml.AliasEvent) or anchor:
                line = event.start_mark.line + 1 if event.start_mark is not None else "?"
                raise SeriesError(
                    f"{loc.path}:{line}: YAML anchors and aliases are not allowed in a series file",
                    tip="write the value out in full",
                )
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, loc) from None


def _yaml_error(exc: yaml.YAMLError, loc: _Loc) -> SeriesError:
    mark = getattr(exc, "problem_mark", None)
    line = f":{mark.line + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc)
    return SeriesError(f"{loc.path}{line}: not valid YAML: {problem}", tip="fix the syntax")


def _mapping(node: yaml.Node, loc: _Loc, what: str) -> dict[str, yaml.Node]:
    import yaml

    if not isinstance(node, yaml.MappingNode):
        raise loc.err(node, f"{what} must be a mapping")
    out: dict[str, yaml.Node] = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            raise loc.err(key_node, f"{what}: keys must be plain strings")
        key = key_node.value
        if key in out:
            raise loc.err(key_node, f"{what}: duplicate key '{key}'")
        out[key] = value_node
    return out


def _check_keys(
    m: dict[str, yaml.Node], allowed: Iterable[str], loc: _Loc, what: str, nodes: yaml.Node
) -> None:
    allowed = list(allowed)
    for key, value in m.items():
        if key not in allowed:
            raise loc.err(
                value,
                f"{what}: unknown key '{key}'{_suggest(key, allowed)}",
                tip=f"allowed keys: {', '.join(allowed)}",
            )


def _scalar(node: yaml.Node, loc: _Loc, what: str, *, allow_empty: bool = False) -> str:
    import yaml

    if not isinstance(node, yaml.ScalarNode):
        raise loc.err(node, f"{what} must be a string")
    value = _native(node, loc) if node.tag != "tag:yaml.org,2002:str" else node.value
    if value is None:
        value = ""
    if not isinstance(value, str):
        # Numbers, booleans: a tag such as 1.2 is accepted but must be quoted
        # to survive, so ask for it instead of guessing.
        raise loc.err(
            node,
            f"{what} must be a string, got {type(value).__name__} '{node.value}'",
            tip=f'quote it: "{node.value}"',
        )
    if not allow_empty and not value.strip():
        raise loc.err(node, f"{what} must not be empty")
    return value


_URL_IN_TEXT = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^\s<>\"')\]]+")
UPSTREAM_CREDENTIAL_TIP = (
    "name the pull/merge request by its plain URL (https://host/owner/repo/pull/N): "
    "status --upstream takes the forge's token from GITHUB_TOKEN / GITLAB_TOKEN"
)


def upstream_credentials(text: str) -> str | None:
    """The first URL in an ``upstream:`` text that carries a user name, password or
    token, shown with its secret hidden (None when there is none)."""
    for m in _URL_IN_TEXT.finditer(text):
        url = m.group(0).rstrip(".,;:")
        if url_has_credentials(url) or "@" in url.split("://", 1)[1].split("/", 1)[0]:
            return hide_url_secrets(url)
    return None


def _upstream(node: yaml.Node, loc: _Loc, what: str) -> str:
    value = _scalar(node, loc, f"{what}: upstream", allow_empty=True)
    shown = upstream_credentials(value)
    if shown is not None:
        raise loc.err(
            node,
            f"{what}: upstream URL {shown} carries credentials; series.yaml never holds one",
            tip="remove the user/token part of the URL. " + UPSTREAM_CREDENTIAL_TIP,
        )
    return value


def _native(node: yaml.Node, loc: _Loc) -> Any:
    """The Python value of a composed node (SafeLoader rules), errors with the node's line.

    Constructed from the node itself: re-serialising it (the obvious shortcut) turns an
    empty value such as ``version:`` into an empty document that PyYAML cannot read.
    """
    import yaml

    loader = yaml.SafeLoader("")
    try:
        return loader.construct_document(node)
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
        problem = getattr(exc, "problem", None) or str(exc)
        raise loc.err(
            node,
            f"cannot read the value {node.value!r}: {problem}"
            if isinstance(node, yaml.ScalarNode)
            else f"cannot read this value: {problem}",
        ) from None
    finally:
        loader.dispose()


def _required(
    m: dict[str, yaml.Node], key: str, loc: _Loc, what: str, parent: yaml.Node
) -> yaml.Node:
    if key not in m:
        raise loc.err(parent, f"{what}: missing required key '{key}'")
    return m[key]


# The last few texts parsed, and their Series: a process parses the same bytes
# several times (load, the read-back check of a write, the rebase journal), and
# the result does not depend on ``path`` (only error messages do; errors are not kept).
_PARSED: dict[str, Series] = {}
_PARSED_MAX = 4


def parse_series(text: str, *, path: str = SERIES_FILE) -> Series:
    """Parse and validate series.yaml text. Raises :class:`SeriesError`."""
    hit = _PARSED.get(text)
    if hit is not None:
        return hit
    series = _parse_series(text, path=path)
    note_parsed(text, series)
    return series


def note_parsed(text: str, series: Series) -> None:
    """Keep ``series`` as what ``text`` parses to in this process (the caller proved it:
    :mod:`forkpatch.seriescache` read it back for exactly this text)."""
    if len(_PARSED) >= _PARSED_MAX:
        _PARSED.pop(next(iter(_PARSED)))
    _PARSED[text] = series


def _parse_series(text: str, *, path: str) -> Series:
    import yaml

    from forkpatch.markers import merge_markers, unresolved_merge

    markers = merge_markers(text.encode("utf-8", "surrogateescape"))
    if markers is not None:
        raise unresolved_merge(
            path,
            markers,
            "run `forkpatch status` (with a work tree, `forkpatch apply` takes the merged "
            "series into it)",
        )
    loc = _Loc(path)
    _check_no_aliases(text, loc)
    try:
        root = yaml.compose(text, Loader=_loader())
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, loc) from None
    if root is None:
        raise SeriesError(
            f"{path}: the file is empty", tip="run `forkpatch init --fork-url URL --base TAG`"
        )
    top = _mapping(root, loc, "top level")
    _check_keys(top, TOP_KEYS, loc, "top level", root)

    version = FORMAT_VERSION
    if "version" in top:
        v = _native(top["version"], loc)
        if isinstance(v, bool) or not isinstance(v, int):
            shown = str(v).lower() if isinstance(v, bool) else repr(v)
            raise loc.err(
                top["version"],
                f"version must be the whole number {FORMAT_VERSION}, got "
                f"{type(v).__name__.replace('bool', 'boolean')} {shown}",
                tip=f"write `version: {FORMAT_VERSION}`",
            )
        if v != FORMAT_VERSION:
            raise loc.err(
                top["version"],
                f"unsupported series format version {v!r}; "
                f"this forkpatch reads version {FORMAT_VERSION}",
                tip="upgrade forkpatch",
            )

    fork_node = _required(top, "fork", loc, "top level", root)
    fm = _mapping(fork_node, loc, "fork")
    _check_keys(fm, FORK_KEYS, loc, "fork", fork_node)
    url_node = _required(fm, "url", loc, "fork", fork_node)
    url = _scalar(url_node, loc, "fork.url")
    if url_has_credentials(url):
        raise loc.err(
            url_node,
            f"fork.url {hide_url_secrets(url)} carries a password or token; forkpatch never "
            "stores credentials (series.yaml, wheels and reports are shared)",
            tip=CREDENTIAL_TIP,
        )
    fork = ForkInfo(
        name=_scalar(_required(fm, "name", loc, "fork", fork_node), loc, "fork.name"),
        url=url,
        distribution=_scalar(fm["distribution"], loc, "fork.distribution")
        if "distribution" in fm
        else "1cat-vllm",
    )

    base_node = _required(top, "base", loc, "top level", root)
    bm = _mapping(base_node, loc, "base")
    _check_keys(bm, BASE_KEYS, loc, "base", base_node)
    commit_node = _required(bm, "commit", loc, "base", base_node)
    tag = _scalar(bm["tag"], loc, "base.tag") if "tag" in bm else ""
    branch = _scalar(bm["branch"], loc, "base.branch") if "branch" in bm else ""
    if (
        isinstance(commit_node, yaml.ScalarNode)
        and not commit_node.style
        and COMMIT_RE.match(commit_node.value)
    ):
        # A commit id made of digits only reads as a number in YAML; the text is the id.
        commit = commit_node.value
    else:
        commit = _commit_text(commit_node, loc)
    if not COMMIT_RE.match(commit):
        raise loc.err(
            commit_node,
            f"base.commit must be a full 40-hex commit id, got '{commit}'",
            tip="`git rev-parse TAG^{commit}` prints it",
        )
    if tag and re.fullmatch(r"[0-9a-f]{4,40}", tag) and commit.startswith(tag):
        # Written by an older forkpatch for a rebase onto a commit id: that is no tag.
        tag = ""
    base = BaseRef(tag=tag, commit=commit, branch=branch)

    # The sections first: the team's own smoke checks are names a patch may use.
    sections: dict[str, SectionConfig] = {}
    known: tuple[str, ...] = ()
    if any(key not in ("version", "fork", "base", "patches") for key in top):
        from forkpatch.sections import SECTIONS, SmokeConfig

        for name, cls in SECTIONS.items():
            if name in top:
                sections[name] = cls.from_values(_section_values(top[name], loc, name))
        smoke_cfg = sections.get("smoke")
        known = tuple(smoke_cfg.team_checks()) if isinstance(smoke_cfg, SmokeConfig) else ()

    patches: list[PatchEntry] = []
    if "patches" in top and not (
        isinstance(top["patches"], yaml.ScalarNode) and _native(top["patches"], loc) is None
    ):
        plist = top["patches"]
        if not isinstance(plist, yaml.SequenceNode):
            raise loc.err(plist, "patches must be a list")
        seen_names: dict[str, int] = {}
        seen_files: dict[str, int] = {}
        for item in plist.value:
            entry = _parse_entry(item, loc, known)
            if entry.name in seen_names:
                raise loc.err(
                    item,
                    f"duplicate patch name '{entry.name}' (first at line {seen_names[entry.name]})",
                )
            seen_names[entry.name] = entry.line
            if entry.file is not None:
                if entry.file in seen_files:
                    raise loc.err(
                        item,
                        f"patch '{entry.name}': file '{entry.file}' is already "
                        f"used by the entry at line {seen_files[entry.file]}",
                    )
                seen_files[entry.file] = entry.line
            patches.append(entry)

    return Series(
        fork=fork,
        base=base,
        patches=tuple(patches),
        sections=sections,
        version=version,
        header_comment=_header_comment(text),
    )


def _section_values(node: yaml.Node, loc: _Loc, name: str) -> dict[str, Value]:
    """A section's keys as Values that know their line (and their items' lines)."""
    out: dict[str, Value] = {}
    for key, value_node in _mapping(node, loc, name).items():
        out[key] = _value(value_node, loc, f"{name}.{key}")
    return out


def _value(node: yaml.Node, loc: _Loc, name: str) -> Value:
    import yaml

    from forkpatch.sections import Value

    at = f"{loc.path}:{node.start_mark.line + 1}"
    if isinstance(node, yaml.SequenceNode):
        items = tuple(f"{loc.path}:{n.start_mark.line + 1}" for n in node.value)
        return Value([_native(n, loc) for n in node.value], at, name, items=items)
    if isinstance(node, yaml.MappingNode):
        keys = {k: _value(v, loc, f"{name}.{k}") for k, v in _mapping(node, loc, name).items()}
        return Value({k: v.value for k, v in keys.items()}, at, name, keys=keys)
    return Value(_native(node, loc), at, name)


def _commit_text(node: yaml.Node, loc: _Loc) -> str:
    """base.commit as written: never "quote it" for a value that is not a commit id."""
    import yaml

    if isinstance(node, yaml.ScalarNode) and node.tag != "tag:yaml.org,2002:str":
        value = _native(node, loc)
        if not isinstance(value, str):
            raise loc.err(
                node,
                f"base.commit must be a full 40-hex commit id, got {node.value!r}",
                tip="`git rev-parse TAG^{commit}` prints it",
            )
    return _scalar(node, loc, "base.commit")


def _parse_entry(item: yaml.Node, loc: _Loc, known: Iterable[str] = ()) -> PatchEntry:
    """One patch entry; ``known``: the check ids it may name besides the built-in ones
    (the team's own, from the smoke section)."""
    import yaml

    known = (*SMOKE_CHECKS, *HOST_SMOKE_CHECKS, *known)
    m = _mapping(item, loc, "patch entry")
    _check_keys(m, PATCH_KEYS, loc, "patch entry", item)
    name_node = _required(m, "name", loc, "patch entry", item)
    name = _scalar(name_node, loc, "patch name")
    if not NAME_RE.match(name):
        raise loc.err(
            name_node,
            f"patch name '{name}' must be a slug: lower-case letters, "
            "digits, '.', '_' and '-', starting with a letter or digit",
        )
    what = f"patch '{name}'"
    file = build_step = None
    if "file" in m:
        file = _scalar(m["file"], loc, f"{what}: file")
        check_series_file_path(file, where=f"{loc.path}:{m['file'].start_mark.line + 1}")
    if "build-step" in m:
        build_step = _scalar(m["build-step"], loc, f"{what}: build-step")
        if build_step not in BUILD_STEPS:
            raise loc.err(
                m["build-step"],
                f"{what}: unknown build-step '{build_step}'{_suggest(build_step, BUILD_STEPS)}",
                tip=f"known build steps: {', '.join(BUILD_STEPS)}",
            )
    if (file is None) == (build_step is None):
        raise loc.err(
            item, f"{what}: needs exactly one of 'file' (a patch in patches/) or 'build-step'"
        )
    smoke: tuple[str, ...] = ()
    if "smoke" in m:
        node = m["smoke"]
        if not isinstance(node, yaml.SequenceNode):
            raise loc.err(node, f"{what}: smoke must be a list of check ids")
        smoke = tuple(_scalar(n, loc, f"{what}: smoke check") for n in node.value)
        for n, cid in zip(node.value, smoke, strict=True):
            if cid not in known:
                raise loc.err(
                    n,
                    f"{what}: unknown smoke check '{cid}'{_suggest(cid, known)}",
                    tip="`forkpatch smoke --list-checks` lists the known checks",
                )
    upstream_commits: tuple[str, ...] = ()
    if "upstream-commits" in m:
        node = m["upstream-commits"]
        if not isinstance(node, yaml.SequenceNode):
            raise loc.err(node, f"{what}: upstream-commits must be a list of commit ids")
        ids = []
        for n in node.value:
            oid = _scalar(n, loc, f"{what}: upstream commit")
            if not UPSTREAM_COMMIT_RE.match(oid):
                raise loc.err(
                    n,
                    f"{what}: upstream commit '{oid}' is not a commit id "
                    "(7 to 64 lower-case hex digits)",
                )
            ids.append(oid)
        upstream_commits = tuple(ids)
    drop_when, passes_without, upstreamed = "", tuple[str, ...](), False
    if "drop-when" in m:
        drop_when, passes_without, upstreamed = _drop_when(m["drop-when"], loc, what, known)
    return PatchEntry(
        name=name,
        file=file,
        build_step=build_step,
        summary=_scalar(_required(m, "summary", loc, what, item), loc, f"{what}: summary"),
        why=_scalar(m["why"], loc, f"{what}: why", allow_empty=True) if "why" in m else "",
        upstream=_upstream(m["upstream"], loc, what) if "upstream" in m else "",
        origin=_scalar(m["origin"], loc, f"{what}: origin", allow_empty=True)
        if "origin" in m
        else "",
        upstream_commits=upstream_commits,
        smoke=smoke,
        drop_when=drop_when,
        drop_when_passes_without=passes_without,
        drop_when_upstreamed=upstreamed,
        line=item.start_mark.line + 1,
    )


def _drop_when(
    node: yaml.Node, loc: _Loc, what: str, known: tuple[str, ...]
) -> tuple[str, tuple[str, ...], bool]:
    """``drop-when``: a text, or a mapping of its text and the conditions to evaluate;
    ``known``: the check ids ``passes-without`` may name (checked here, as ``smoke:``)."""
    import yaml

    if not isinstance(node, yaml.MappingNode):
        return _scalar(node, loc, f"{what}: drop-when", allow_empty=True), (), False
    m = _mapping(node, loc, f"{what}: drop-when")
    _check_keys(m, DROP_WHEN_KEYS, loc, f"{what}: drop-when", node)
    text = (
        _scalar(m["text"], loc, f"{what}: drop-when.text", allow_empty=True) if "text" in m else ""
    )
    checks: tuple[str, ...] = ()
    if "passes-without" in m:
        seq = m["passes-without"]
        if not isinstance(seq, yaml.SequenceNode) or not seq.value:
            raise loc.err(
                seq,
                f"{what}: drop-when.passes-without must be a non-empty list of smoke check ids",
                tip="e.g. passes-without: [sm70.fp8-per-block-config]",
            )
        checks = tuple(
            _scalar(n, loc, f"{what}: drop-when.passes-without check") for n in seq.value
        )
        for n, cid in zip(seq.value, checks, strict=True):
            if cid not in known:
                raise loc.err(
                    n,
                    f"{what}: drop-when.passes-without names unknown smoke check "
                    f"'{cid}'{_suggest(cid, known)}",
                    tip="`forkpatch smoke --list-checks` lists the known checks",
                )
    upstreamed = False
    if "upstreamed" in m:
        value = _native(m["upstreamed"], loc)
        if not isinstance(value, bool):
            raise loc.err(
                m["upstreamed"],
                f"{what}: drop-when.upstreamed must be true or false, got {m['upstreamed'].value!r}",
            )
        upstreamed = value
    if not checks and not upstreamed:
        raise loc.err(
            node,
            f"{what}: drop-when as a mapping needs a condition: passes-without (smoke checks "
            "that pass without the patch) or upstreamed: true",
            tip="or write the condition as plain text: drop-when: <text>",
        )
    return text, checks, upstreamed


def check_series_file_path(file: str, *, where: str) -> None:
    """A patch file named in series.yaml must stay inside patches/."""
    bad = (
        not file
        or file.startswith(("/", "\\"))
        or "\\" in file
        or "\0" in file
        or any(part in ("", ".", "..") for part in file.split("/"))
        or re.match(r"^[A-Za-z]:", file) is not None
    )
    if bad:
        raise SeriesError(
            f"{where}: patch file '{file}' must be a relative path inside "
            f"{PATCHES_DIR}/ without '..'",
            tip="name the file by its slug, e.g. 'my-fix.patch'",
        )


def _header_comment(text: str) -> str:
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("#") or (not line.strip() and lines):
            lines.append(line)
        else:
            break
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines)


def load_series(path: Path) -> Series:
    return load_series_bytes(path)[0]


def load_series_bytes(path: Path) -> tuple[Series, bytes]:
    """series.yaml parsed, with the bytes it was parsed from."""
    data = read_series_bytes(path)
    return parse_series_bytes(data, path), data


def read_series_bytes(path: Path) -> bytes:
    """series.yaml's bytes (a regular file, bounded in size), or the error saying where
    a series starts."""
    from forkpatch.fsutil import read_regular

    try:
        return read_regular(path)
    except FileNotFoundError:
        raise SeriesError(
            f"{path}: not found",
            tip="run `forkpatch init --fork-url URL --base TAG` to start a series, "
            "or run forkpatch in the project directory (-C DIR)",
        ) from None


def parse_series_bytes(data: bytes, path: Path) -> Series:
    """series.yaml's bytes (read from ``path``) parsed."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise SeriesError(f"{path}:{line}: not valid UTF-8", tip="save the file as UTF-8") from None
    return parse_series(text, path=str(path.name if path.name == SERIES_FILE else path))


# --------------------------------------------------------------------------- writing


def _block_literal(value: str, indent: int) -> str:
    """``value`` as a ``|`` block whose lines are indented ``indent`` spaces, two more
    than the key it belongs to."""
    pad = " " * indent
    body = value if value.endswith("\n") else value + "\n"
    chomp = (
        ""
        if value.endswith("\n") and not value.endswith("\n\n")
        else ("+" if value.endswith("\n\n") else "-")
    )
    # YAML takes a block's indentation from its first non-empty line: when that line
    # starts with a space, say the indentation (2, relative to the key) explicitly.
    first = next((line for line in body.split("\n") if line), "")
    indicator = "2" if first.startswith(" ") else ""
    lines = "".join((pad + line if line else "") + "\n" for line in body[:-1].split("\n"))
    return f"|{indicator}{chomp}\n{lines}".rstrip("\n")


# Names, files, tags and commit ids: no indicator, space or quote, so the emitter
# writes them plain unless the resolver reads them as another type (true, null, 12).
_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]*\Z")
_RESOLVERS: list[Any] = []  # PyYAML's resolver, made once (with PyYAML's first use)
_STR = "tag:yaml.org,2002:str"


def _plain_resolves_to_str(value: str) -> bool:
    import yaml

    if not _RESOLVERS:
        _RESOLVERS.append(yaml.resolver.Resolver())
    tag = _RESOLVERS[0].resolve(yaml.ScalarNode, value, (True, False))
    return bool(tag == _STR)


def _scalar_yaml(value: str, indent: int) -> str:
    """Render one string value: block literal for multi-line text, else flow.

    A block is used only when it reads back as the same text (characters a block
    cannot hold, such as a carriage return or a control character, get a quoted
    string instead)."""
    import yaml

    if "\n" in value.rstrip("\n"):
        try:
            # The block as it stands in the file: followed by a line break (a block
            # at the very end of a document without one would lose its last newline).
            again = yaml.load("k: " + _block_literal(value, 2) + "\n", Loader=_loader())
        except yaml.YAMLError:
            again = None
        if isinstance(again, dict) and again.get("k") == value:
            return _block_literal(value, indent)
        quoted = yaml.safe_dump(value, default_style='"', width=10_000, allow_unicode=True)
        return quoted.rstrip("\n").removesuffix("\n...")
    if _PLAIN.match(value) and _plain_resolves_to_str(value):
        return value  # what safe_dump writes for it, without its (slow) emitter
    dumped = yaml.safe_dump(value, default_style=None, width=10_000, allow_unicode=True)
    dumped = dumped.rstrip("\n")
    if dumped.endswith("\n..."):
        dumped = dumped[: -len("\n...")]
    if dumped.startswith("'") and "'" in value:
        # "fork's" reads better than 'fork''s'; a JSON string is a valid YAML scalar
        # (unless a character such as NEL means a line break inside it).
        as_json = json.dumps(value, ensure_ascii=False)
        if yaml.load(as_json, Loader=_loader()) == value:
            dumped = as_json
    return dumped


def _flow_round_trips(inner: str, value: list[str]) -> bool:
    import yaml

    try:
        return bool(yaml.load(f"[{inner}]", Loader=_loader()) == value)
    except yaml.YAMLError:
        return False


def _emit_value(key: str, value: Any, indent: int) -> list[str]:
    import yaml

    pad = " " * indent
    if isinstance(value, str):
        return [f"{pad}{key}: {_scalar_yaml(value, indent + 2)}"]
    if isinstance(value, (list, tuple)):
        if not value:
            return [f"{pad}{key}: []"]
        if all(isinstance(v, str) and "\n" not in v for v in value):
            inner = ", ".join(_scalar_yaml(v, 0) for v in value)
            line = f"{pad}{key}: [{inner}]"
            # A flow list only when it reads back as the same list (an item such as
            # "a]" or "x, y" would change meaning inside [...]).
            if len(line) <= 100 and _flow_round_trips(inner, list(value)):
                return [line]
            return [f"{pad}{key}:"] + [f"{pad}  - {_scalar_yaml(v, 0)}" for v in value]
    if isinstance(value, Mapping):
        out = [f"{pad}{key}:"]
        for k, v in value.items():
            out.extend(_emit_value(k, v, indent + 2))
        return out
    dumped = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    if dumped.endswith("\n..."):
        dumped = dumped[: -len("\n...")]
    return [f"{pad}{key}: {dumped}"]


def dump_series(series: Series) -> str:
    """Canonical text of a series: same series, same bytes."""
    out: list[str] = []
    if series.header_comment:
        out.append(series.header_comment)
        out.append("")
    out.append(f"version: {series.version}")
    out.extend(
        _emit_value(
            "fork",
            {
                "name": series.fork.name,
                "url": series.fork.url,
                "distribution": series.fork.distribution,
            },
            0,
        )
    )
    base: dict[str, str] = {"tag": series.base.tag} if series.base.tag else {}
    base["commit"] = series.base.commit
    if series.base.branch:
        base["branch"] = series.base.branch
    out.extend(_emit_value("base", base, 0))
    if not series.patches:
        out.append("patches: []")
    else:
        out.append("patches:")
        for p in series.patches:
            fields: list[tuple[str, Any]] = [("name", p.name)]
            if p.file is not None:
                fields.append(("file", p.file))
            if p.build_step is not None:
                fields.append(("build-step", p.build_step))
            fields.append(("summary", p.summary))
            for key, value in (("why", p.why), ("upstream", p.upstream), ("origin", p.origin)):
                if value:
                    fields.append((key, value))
            if p.upstream_commits:
                fields.append(("upstream-commits", list(p.upstream_commits)))
            if p.smoke:
                fields.append(("smoke", list(p.smoke)))
            if p.drop_condition:
                cond: dict[str, Any] = {"text": p.drop_when} if p.drop_when else {}
                if p.drop_when_passes_without:
                    cond["passes-without"] = list(p.drop_when_passes_without)
                if p.drop_when_upstreamed:
                    cond["upstreamed"] = True
                fields.append(("drop-when", cond))
            elif p.drop_when:
                fields.append(("drop-when", p.drop_when))
            first = True
            for key, value in fields:
                lines = _emit_value(key, value, 4)
                if first:
                    lines[0] = "  - " + lines[0][4:]
                    first = False
                out.extend(lines)
    if series.sections:  # the sections module loads only for a series that has some
        from forkpatch.sections import SECTIONS, SectionConfig

        for name in SECTIONS:
            cfg = series.sections.get(name)
            if isinstance(cfg, SectionConfig) and cfg:
                out.extend(_emit_value(name, cfg.as_mapping(), 0))
    return "\n".join(out) + "\n"


def save_series(series: Series, path: Path) -> bool:
    """Write series.yaml atomically; returns False when the bytes are unchanged."""
    text = dump_series(series)
    # Never write something we could not read back.
    parse_series(text, path=str(path))
    return atomic_write(path, text.encode("utf-8"))


def new_series(
    *, fork_name: str, fork_url: str, distribution: str, tag: str, commit: str
) -> Series:
    header = (
        "# forkpatch series: the private patches carried on top of the fork.\n"
        "# Order matters: patches apply top to bottom. Edit with `forkpatch` commands\n"
        "# (or by hand; `forkpatch status` validates it)."
    )
    return Series(
        fork=ForkInfo(fork_name, fork_url, distribution),
        base=BaseRef(tag, commit),
        header_comment=header,
    )
