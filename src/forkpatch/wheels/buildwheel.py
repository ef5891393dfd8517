"""`forkpatch build-wheel`: from the series to a wheel with a version and provenance.

Two builders sit behind one Protocol (:class:`Builder`) and one entry point
(:func:`build_wheel`):

- :class:`OverlayBuilder`: the fork's released wheel for the base tag, with the
  patched Python files replaced (seconds; only when no compiled source is touched);
- :class:`ContainerBuilder`: the patched tree built from source in the SM70 builder
  image through the Docker engine (minutes to hours, cached by ccache/sccache).

:func:`choose_builder` (pure) takes the one asked for, or for ``auto`` the overlay
when it fits and the container otherwise, and says why; whichever builds, the wheels
enter dist/ once, with their SHA256SUMS, as one unit.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar, Protocol

from packaging.version import InvalidVersion, Version

from forkpatch import __version__, log
from forkpatch.engine import SeriesApplier
from forkpatch.errors import BuildError, PatchApplyError
from forkpatch.fsutil import file_sha256, sweep_temps
from forkpatch.kinds import BUILD_MODES, BuilderMode, BuildMode
from forkpatch.project import Project
from forkpatch.series import BaseRef, PatchEntry, Series
from forkpatch.wheels.dist import commit_dist, dist_changes, recover_dist
from forkpatch.wheels.identity import (
    BuilderInfo,
    PatchRecord,
    Provenance,
    build_version,
    patchset_label,
    sha256_hex,
)
from forkpatch.wheels.options import DEFAULT_BASE_IMAGE, BuildOptions
from forkpatch.wheels.overlay import (
    DEFAULT_COMPILED_PATTERNS,
    BuildStep,
    WheelMembers,
    by_importance,
    compiled_paths_touched,
    describe_compiled,
    overlay_wheel,
    tree_path_to_wheel_path,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from forkpatch.git import Git
    from forkpatch.wheels.sourcetree import TreeEntry


@dataclass(frozen=True)
class BuildResult:
    """A finished build: which builder and why, the version, the wheels in dist/."""

    mode: BuilderMode
    reason: str
    version: str
    wheels: tuple[Path, ...]
    provenance: Provenance
    log_path: Path | None = None
    seconds: float = 0.0
    sha256: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "mode": self.mode,
            "reason": self.reason,
            "version": self.version,
            "wheels": [str(w) for w in self.wheels],
            "sha256": dict(self.sha256),
            "log": str(self.log_path) if self.log_path else None,
            "seconds": round(self.seconds, 3),
            "provenance": self.provenance.to_dict(),
        }


def fork_version(tag: str) -> str:
    text = tag[1:] if tag[:1] in ("v", "V") else tag
    try:
        return str(Version(text))
    except InvalidVersion:
        raise BuildError(
            f"the base tag '{tag}' is not a version; cannot name the wheel",
            tip="base the series on a release tag such as v1.2.1",
        ) from None


def fill_base_wheel(template: str, tag: str, version: str) -> str:
    """build.base-wheel with its placeholders filled in for one base of the fork:
    ``{tag}`` (the tag, or the commit id for a base no tag names) and ``{version}``
    (the fork's version there). build-wheel, droppable and track all use it."""
    return template.replace("{tag}", tag).replace("{version}", version)


def configured_base_wheel(
    project: Project, base: BaseRef, version: str, given: Path | None = None
) -> tuple[Path | None, str]:
    """The base wheel for the fork at ``base`` (version ``version``) and where it comes
    from: ``given`` (--base-wheel), else build.base-wheel filled in for ``base``, else
    the one `forkpatch base-wheel` built for its commit; (None, "") when none."""
    from forkpatch.wheels.basewheel import cached

    if given is not None:
        return given, "--base-wheel"
    template = project.series.build.base_wheel
    if template:
        path = Path(fill_base_wheel(template, base.tag or base.commit, version)).expanduser()
        return (path if path.is_absolute() else project.root / path), "build.base-wheel"
    hit = cached(project, base.commit, version)
    if hit is not None:
        log.info(f"base wheel: {hit} (built by `forkpatch base-wheel` for {base.describe()})")
        return hit, "forkpatch base-wheel"
    return None, ""


def series_fork_version(project: Project) -> str:
    """The fork's version at the series' base: its release tag's, or counted from the
    nearest release below a base no release tag names (:mod:`forkpatch.baseversion`)."""
    from forkpatch.baseversion import base_version

    series = project.series
    return base_version(project.fork(), series.base, series.track.pattern).version


def _patch_bytes(project: Project, entry: PatchEntry) -> bytes:
    data = project.raw_patch_bytes(entry)
    if data is None:
        project.load_patch(entry)  # raises the error naming the missing file
    return data or b""


def patch_items(project: Project, series: Series) -> list[tuple[str, bytes]]:
    items = []
    for e in series.patches:
        if e.file is not None:
            items.append((e.name, _patch_bytes(project, e)))
        else:
            items.append((e.name, f"build-step:{e.build_step}".encode()))
    return items


def expected_provenance(project: Project, builder: BuilderInfo) -> Provenance:
    series = project.series
    records = []
    for e in series.patches:
        if e.file is not None:
            records.append(PatchRecord(e.name, sha256=sha256_hex(_patch_bytes(project, e))))
        else:
            records.append(PatchRecord(e.name, build_step=e.build_step))
    return Provenance(
        fork_url=series.fork.url,
        tag=series.base.tag,
        commit=series.base.commit,
        patches=tuple(records),
        forkpatch_version=__version__,
        builder=builder,
    )


def build_steps(series: Series) -> list[BuildStep | Callable[[WheelMembers], None]]:
    """The build steps series.yaml's build-step entries add to the wheel."""
    steps: list[BuildStep | Callable[[WheelMembers], None]] = []
    for e in series.patches:
        if e.build_step == "vllm-dist-info":
            from forkpatch.wheels.dist_alias import make_dist_alias_step

            steps.append(make_dist_alias_step())
    return steps


def apply_in_memory(project: Project, base: str) -> tuple[str, list[str]]:
    """The series applied to ``base`` in memory: (the result's commit, files it touched)."""
    series = project.series
    with log.step(f"apply {len(series.patches)} patch(es) to {series.base.label} in memory"):
        result = SeriesApplier(project.fork().store, base).run(project.items(), write=True)
        bad = result.first_conflict()
        if bad is not None:
            raise PatchApplyError(
                bad.describe_failure(series.base.label),
                tip="fix the series first (`forkpatch status`)",
            )
    return result.head or base, sorted({f for r in result.results for f in r.files})


def wheel_replacements(store: Git, head: str, touched: list[str]) -> dict[str, bytes | None]:
    """In-wheel path -> the bytes the series gives it at ``head`` (None: deleted)."""
    replacements: dict[str, bytes | None] = {}
    with store.reader() as reader:
        for path in touched:
            wheel_path = tree_path_to_wheel_path(path)
            if wheel_path is None:
                continue
            got = reader.read(f"{head}:{path}")
            replacements[wheel_path] = got[1] if got and got[0] == "blob" else None
    return replacements


def series_wheel_files(project: Project) -> tuple[dict[str, bytes | None], dict[str, str]]:
    """What an overlay build puts into a wheel for the series, from the series re-applied
    in memory on its base commit as :func:`build_wheel` does: (the bytes of every file
    the series changed, None for deleted; the blob id of every file of the result's
    tree), both by in-wheel path."""
    series = project.series
    store = project.fork().store
    base = project.fork().verify_base(series.base.tag, series.base.commit)
    head, touched = apply_in_memory(project, base)
    tree: dict[str, str] = {}
    for path, (mode, oid) in store.ls_tree(head).items():
        wheel_path = tree_path_to_wheel_path(path)
        if wheel_path is not None and mode in ("100644", "100755"):
            tree[wheel_path] = oid
    return wheel_replacements(store, head, touched), tree


def build_wheel(project: Project, opts: BuildOptions) -> BuildResult:
    """The series' wheel(s) built into the dist directory, with their SHA256SUMS: the
    inputs settled (:func:`build_context`), a builder chosen (:func:`choose_builder`),
    the wheels built aside and committed into dist/ once."""
    started = time.monotonic()
    requested = requested_mode(opts, project.series.build.mode)
    ctx = build_context(project, opts)
    builder, reason = choose_builder(ctx, requested)
    log.info(f"build mode: {builder.mode} ({reason}); version {ctx.version}")
    # Built aside, then the wheels and SHA256SUMS enter dist/ as one unit: a build
    # killed at any point leaves dist/ exactly as it was or exactly as it ends.
    stage = Path(tempfile.mkdtemp(prefix=".forkpatch-stage-", dir=ctx.out_dir))
    try:
        built = builder.build(ctx, stage)
        staged = list(built.wheels)
        if ctx.out_dir.is_relative_to(project.root):
            project.commit(extra=dist_changes(ctx.out_dir, staged))
        else:
            # A dist directory outside the project keeps its own journal there.
            commit_dist(ctx.out_dir, staged)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    wheels = tuple(ctx.out_dir / w.name for w in staged)
    return BuildResult(
        mode=builder.mode,
        reason=reason,
        version=ctx.version,
        wheels=wheels,
        provenance=built.provenance,
        log_path=built.log_path,
        seconds=time.monotonic() - started,
        sha256=MappingProxyType({w.name: file_sha256(w) for w in wheels}),
    )


def dist_dir(project: Project, opts: BuildOptions) -> Path:
    """Where a build writes its wheels: ``opts.out_dir``, else build.dist-dir, else dist/."""
    return (opts.out_dir or project.root / (project.series.build.dist_dir or "dist")).resolve()


def requested_mode(opts: BuildOptions, configured: BuildMode | None) -> BuildMode:
    """The mode asked for: the option's, else build.mode's when the option is auto."""
    mode = opts.mode if opts.mode != "auto" else (configured or "auto")
    if mode not in BUILD_MODES:
        raise BuildError(f"unknown build mode '{mode}'", tip=f"use one of {', '.join(BUILD_MODES)}")
    return mode


def build_context(project: Project, opts: BuildOptions) -> BuildContext:
    """A build's inputs, settled before a builder is chosen: dist/ made (and a killed
    build's commit finished), the series applied in memory, the version, the compiled
    files it touches and the base wheel."""
    series = project.series
    cfg = series.build
    fork = project.fork()
    base = fork.verify_base(series.base.tag, series.base.commit)
    out_dir = dist_dir(project, opts)
    out_dir.mkdir(parents=True, exist_ok=True)
    recover_dist(out_dir)  # a build killed mid-commit (a dist directory's own journal)
    if not out_dir.is_relative_to(project.root):
        sweep_temps(out_dir)
    head, touched = apply_in_memory(project, base)
    fork_v = series_fork_version(project)
    patterns = DEFAULT_COMPILED_PATTERNS if cfg.compiled_patterns is None else cfg.compiled_patterns
    base_wheel, _source = configured_base_wheel(project, series.base, fork_v, opts.base_wheel)
    return BuildContext(
        project=project,
        opts=opts,
        store=fork.store,
        base=series.base,
        head=head,
        touched=tuple(touched),
        compiled=tuple(compiled_paths_touched(touched, patterns)),
        version=build_version(fork_v, patchset_label(base, patch_items(project, series))),
        fork_version=fork_v,
        base_wheel=base_wheel,
        out_dir=out_dir,
    )


@dataclass(frozen=True)
class BuildContext:
    """One build's inputs, the same whichever builder makes the wheels."""

    project: Project
    opts: BuildOptions
    store: Git
    base: BaseRef  # the series' base (its tag and commit)
    head: str  # the series applied to the base, in memory
    touched: tuple[str, ...]  # every file the series changes
    compiled: tuple[str, ...]  # those an overlay cannot take (compiled code, packaging)
    version: str  # the wheel's
    fork_version: str  # the fork's at the base
    base_wheel: Path | None  # the fork's wheel to overlay, where one is configured
    out_dir: Path  # dist/


@dataclass(frozen=True)
class Built:
    """What a builder made: its wheels (in the stage directory it was given, not yet
    in dist/), their provenance, and the full build log where it keeps one."""

    wheels: tuple[Path, ...]
    provenance: Provenance
    log_path: Path | None = None


class Builder(Protocol):
    """One way of making the series' wheels (:class:`OverlayBuilder`,
    :class:`ContainerBuilder`)."""

    @property
    def mode(self) -> BuilderMode: ...

    def unfit(self, ctx: BuildContext) -> str | None:
        """Why this builder cannot make ``ctx``'s wheels (auto mode's reason for the
        other one), or None. Pure: it reads ``ctx`` alone."""
        ...

    def refusal(self, ctx: BuildContext) -> BuildError:
        """The error when this builder was asked for by name and is unfit."""
        ...

    def build(self, ctx: BuildContext, stage: Path) -> Built:
        """Make the wheels into ``stage``."""
        ...


def choose_builder(ctx: BuildContext, requested: BuildMode) -> tuple[Builder, str]:
    """The builder for ``requested`` and why (the log's "build mode: X (why)"). Pure:
    no Docker, no log. A builder asked for by name and unfit is refused (BuildError);
    auto takes the overlay where it fits, else the container, with the overlay's reason."""
    if requested != "auto":
        builder: Builder = OverlayBuilder() if requested == "overlay" else ContainerBuilder()
        if builder.unfit(ctx) is not None:
            raise builder.refusal(ctx)
        return builder, "requested"
    why = OverlayBuilder().unfit(ctx)
    if why is None:
        return OverlayBuilder(), OVERLAY_FITS
    # Chosen for want of a base wheel alone: the builder says so (and what would avoid it).
    return ContainerBuilder(for_want_of_base_wheel=not ctx.compiled), why


OVERLAY_FITS = "the series touches only Python files and a base wheel is configured"
NO_BASE_WHEEL = "no base wheel is configured (--base-wheel)"


@dataclass(frozen=True)
class OverlayBuilder:
    """The fork's released wheel for the base with the series' Python files replaced
    (seconds; only when no compiled source is touched and a base wheel is configured)."""

    mode: ClassVar[BuilderMode] = "overlay"

    def unfit(self, ctx: BuildContext) -> str | None:
        if ctx.compiled:
            return (
                f"the series touches compiled code ({', '.join(by_importance(ctx.compiled)[:3])})"
            )
        if ctx.base_wheel is None:
            return NO_BASE_WHEEL
        return None

    def refusal(self, ctx: BuildContext) -> BuildError:
        if ctx.compiled:
            return BuildError(
                "an overlay build cannot include changes to compiled code; the series touches "
                + describe_compiled(list(ctx.compiled)),
                tip="build with --mode container",
            )
        return BuildError(
            f"an overlay build needs the fork's wheel for {ctx.base.describe()} "
            f"({ctx.fork_version})",
            tip=f"pass --base-wheel PATH, set build.base-wheel in series.yaml (it may hold "
            f"{{tag}} and {{version}}), or build a Python-only one: {BASE_WHEEL_COMMAND}",
        )

    def build(self, ctx: BuildContext, stage: Path) -> Built:
        base_wheel = ctx.base_wheel
        if base_wheel is None:
            raise self.refusal(ctx)
        if not base_wheel.is_file():
            raise BuildError(
                f"base wheel {base_wheel} does not exist",
                tip="download the fork's release wheel for the base tag",
            )
        replacements = wheel_replacements(ctx.store, ctx.head, list(ctx.touched))
        builder = BuilderInfo(mode="overlay", base_wheel_sha256=file_sha256(base_wheel))
        prov = expected_provenance(ctx.project, builder)
        series = ctx.project.series
        with log.step(f"overlay {len(replacements)} file(s) onto {base_wheel.name}"):
            wheel = overlay_wheel(
                base_wheel,
                replacements=replacements,
                new_version=ctx.version,
                provenance=prov,
                out_dir=stage,
                extra_steps=build_steps(series),
                expected_fork_version=ctx.fork_version,
                expected_distribution=series.fork.distribution,
            )
        return Built(wheels=(wheel,), provenance=prov)


@dataclass(frozen=True)
class ContainerBuilder:
    """The patched tree built from source in the SM70 builder image through the Docker
    engine (minutes to hours, cached by ccache/sccache). ``for_want_of_base_wheel``:
    auto chose it only because no base wheel was configured for a Python-only series,
    so it says so first, and a failure names the way that needs no container."""

    mode: ClassVar[BuilderMode] = "container"
    for_want_of_base_wheel: bool = False

    def unfit(self, ctx: BuildContext) -> str | None:
        return None  # any series; whether an engine answers is the build's to find

    def refusal(self, ctx: BuildContext) -> BuildError:
        return BuildError(f"a container build cannot build this series: {self.unfit(ctx)}")

    def build(self, ctx: BuildContext, stage: Path) -> Built:
        if not self.for_want_of_base_wheel:
            return _container(ctx, stage)
        _say_why_container(ctx)
        try:
            return _container(ctx, stage)
        except BuildError as exc:
            fork_v = ctx.fork_version
            raise type(exc)(
                f"{exc.message}\n(auto mode built in a container because no base wheel of "
                f"the fork's {fork_v} was given; the series touches only Python files)",
                tip=f"pass --base-wheel with the fork's {fork_v} wheel, or run "
                f"{BASE_WHEEL_COMMAND}" + (f"; or: {exc.tip}" if exc.tip else ""),
            ) from exc


BASE_WHEEL_COMMAND = "`forkpatch base-wheel` (then build-wheel takes it)"


def _say_why_container(ctx: BuildContext) -> None:
    """auto mode on a Python-only series without a base wheel: the overlay path is
    the one that needs no Docker and no network; say so before the container build."""
    toolchain = ctx.opts.toolchain
    offline = (
        "it needs a Docker engine and installs its toolchain from the network"
        if toolchain == "apt"
        else f"it needs a Docker engine (--toolchain {toolchain})"
    )
    log.warn(
        "the series touches only Python files, but there is no base wheel of the fork's "
        f"{ctx.fork_version} ({ctx.base.describe()}) to overlay, so this is a container "
        f"build from source: {offline}. Without them, pass --base-wheel with the fork's "
        f"wheel for the base, or build a Python-only one with {BASE_WHEEL_COMMAND}; "
        "offline container builds take --toolchain wheels --wheelhouse DIR"
    )


def _container(ctx: BuildContext, stage: Path) -> Built:
    """The container build: the tree at ``ctx.head`` built in the builder image into a
    directory of its own, then the fork's wheel re-versioned with its provenance (and
    any other wheel copied) into ``stage``."""
    from forkpatch.wheels.container import CacheConfig, build_in_container

    opts, series = ctx.opts, ctx.project.series
    cfg = series.build
    arch = opts.arch_list or cfg.arch_list or "7.0"
    base_image = opts.base_image or cfg.base_image or DEFAULT_BASE_IMAGE
    logs = ctx.project.state_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"build-{ctx.version}-{time.strftime('%Y%m%dT%H%M%S')}.log"
    entries = _source_entries(ctx.store, ctx.head)
    cache = opts.cache
    if cache is None:
        cache_cfg = cfg.cache.as_mapping() if cfg.cache else {}
        cache = CacheConfig.from_mapping(cache_cfg) if cache_cfg else CacheConfig.from_env()
    with tempfile.TemporaryDirectory(prefix="forkpatch-build-", dir=ctx.out_dir) as tmp:
        raw_dir = Path(tmp) / "raw"
        raw_dir.mkdir()
        resolved = dataclasses.replace(
            opts,
            out_dir=raw_dir,
            arch_list=arch,
            base_image=base_image,
            max_jobs=opts.max_jobs or cfg.max_jobs,
            cache=cache,
        )
        made = build_in_container(entries, resolved, version=ctx.version, log_path=log_path)
        builder = BuilderInfo(
            mode="container",
            image_id=made.image_id,
            build_args={
                "TORCH_CUDA_ARCH_LIST": arch,
                "BASE_IMAGE": base_image,
                "FLASH_ATTN_V100_CUDA_ARCH_LIST": "7.0",
            },
        )
        prov = expected_provenance(ctx.project, builder)
        dist = series.fork.distribution.replace("-", "_").lower()
        final: list[Path] = []
        for w in made.wheels:
            if w.name.lower().startswith(dist + "-"):
                final.append(
                    overlay_wheel(
                        w,
                        replacements={},
                        new_version=ctx.version,
                        provenance=prov,
                        out_dir=stage,
                        extra_steps=build_steps(series),
                    )
                )
            else:
                target = stage / w.name
                shutil.copy2(w, target)
                final.append(target)
    return Built(wheels=tuple(final), provenance=prov, log_path=log_path)


def _source_entries(store: Git, head: str) -> list[TreeEntry]:
    """The tree at ``head`` as (path, mode, bytes) entries, submodules left out."""
    entries: list[TreeEntry] = []
    with store.reader() as reader:
        for path, (mode, oid) in store.ls_tree(head).items():
            if mode == "160000":
                continue  # submodules are not part of the source archive
            data = reader.blob(oid)
            if data is None:
                raise BuildError(
                    f"{path} ({oid}) is missing from the fork's objects",
                    tip="fetch the fork again (`forkpatch status` refreshes it)",
                )
            entries.append((path, int(mode, 8), data))
    return entries
