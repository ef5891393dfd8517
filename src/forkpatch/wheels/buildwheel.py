"""`forkpatch build-wheel`: from the series to a wheel with a version and provenance.

Two builders sit behind one entry point (:func:`build_wheel`):

- ``overlay``: the fork's released wheel for the base tag, with the patched
  Python files replaced (seconds; only when no compiled source is touched);
- ``container``: the patched tree built from source in the SM70 builder image
  through the Docker engine (minutes to hours, cached by ccache/sccache).

``auto`` picks overlay when it is valid and a base wheel is configured, and
says which it picked and why.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from forkpatch import __version__, log
from forkpatch.engine import SeriesApplier
from forkpatch.errors import BuildError, PatchApplyError
from forkpatch.fsutil import file_sha256, sweep_temps
from forkpatch.kinds import BUILD_MODES
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
    by_importance,
    compiled_paths_touched,
    describe_compiled,
    overlay_wheel,
    tree_path_to_wheel_path,
)

MODES = BUILD_MODES


@dataclass
class BuildResult:
    mode: str
    reason: str
    version: str
    wheels: list[Path]
    provenance: Provenance
    log_path: Path | None = None
    seconds: float = 0.0
    sha256: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "reason": self.reason,
            "version": self.version,
            "wheels": [str(w) for w in self.wheels],
            "sha256": self.sha256,
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


def build_steps(series: Series) -> list[Any]:
    steps = []
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


def wheel_replacements(store: Any, head: str, touched: list[str]) -> dict[str, bytes | None]:
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
    started = time.monotonic()
    series = project.series
    cfg = series.build
    fork = project.fork()
    base = fork.verify_base(series.base.tag, series.base.commit)
    out_dir = (opts.out_dir or project.root / (cfg.dist_dir or "dist")).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    recover_dist(out_dir)  # a build killed mid-commit (the container path's journal)
    if out_dir.is_relative_to(project.root):
        from forkpatch.ops import warn_if_not_ignored

        warn_if_not_ignored(project.root, out_dir)
    else:
        sweep_temps(out_dir)

    head, touched = apply_in_memory(project, base)
    fork_v = series_fork_version(project)
    version = build_version(fork_v, patchset_label(base, patch_items(project, series)))
    patterns = DEFAULT_COMPILED_PATTERNS if cfg.compiled_patterns is None else cfg.compiled_patterns
    compiled = compiled_paths_touched(touched, patterns)
    base_wheel, _source = configured_base_wheel(project, series.base, fork_v, opts.base_wheel)

    mode = opts.mode if opts.mode != "auto" else (cfg.mode or "auto")
    if mode not in MODES:
        raise BuildError(f"unknown build mode '{mode}'", tip=f"use one of {', '.join(MODES)}")
    if mode == "overlay" and compiled:
        raise BuildError(
            "an overlay build cannot include changes to compiled code; the series touches "
            + describe_compiled(compiled),
            tip="build with --mode container",
        )
    if mode == "overlay" and base_wheel is None:
        raise BuildError(
            f"an overlay build needs the fork's wheel for {series.base.describe()} ({fork_v})",
            tip=f"pass --base-wheel PATH, set build.base-wheel in series.yaml (it may hold "
            f"{{tag}} and {{version}}), or build a Python-only one: {BASE_WHEEL_COMMAND}",
        )
    if mode == "auto":
        if compiled:
            mode, reason = (
                "container",
                (
                    "the series touches compiled code ("
                    + ", ".join(by_importance(compiled)[:3])
                    + ")"
                ),
            )
        elif base_wheel is None:
            mode, reason = "container", "no base wheel is configured (--base-wheel)"
            _say_why_container(series.base, fork_v, opts)
        else:
            mode, reason = (
                "overlay",
                ("the series touches only Python files and a base wheel is configured"),
            )
    else:
        reason = "requested"
    log.info(f"build mode: {mode} ({reason}); version {version}")

    if mode == "overlay":
        assert base_wheel is not None
        # Built aside, then the wheel and SHA256SUMS enter dist/ as one unit: a build
        # killed at any point leaves dist/ exactly as it was or exactly as it ends.
        stage = Path(tempfile.mkdtemp(prefix=".forkpatch-stage-", dir=out_dir))
        try:
            staged, prov = _overlay(
                project, fork.store, head, touched, (version, fork_v), base_wheel, stage, series
            )
            if out_dir.is_relative_to(project.root):
                project.commit(extra=dist_changes(out_dir, staged))
            else:
                # A dist directory outside the project keeps its own journal there.
                commit_dist(out_dir, staged)
            wheels = [out_dir / w.name for w in staged]
        finally:
            shutil.rmtree(stage, ignore_errors=True)
        log_path = None
    else:
        try:
            wheels, prov, log_path = _container(
                project, fork.store, head, version, out_dir, series, opts
            )
        except BuildError as exc:
            if not (opts.mode == "auto" and not compiled and base_wheel is None):
                raise
            # Chosen only for want of a base wheel: the way that needs no container.
            raise type(exc)(
                f"{exc.message}\n(auto mode built in a container because no base wheel of "
                f"the fork's {fork_v} was given; the series touches only Python files)",
                tip=f"pass --base-wheel with the fork's {fork_v} wheel, or run "
                f"{BASE_WHEEL_COMMAND}" + (f"; or: {exc.tip}" if exc.tip else ""),
            ) from exc
    res = BuildResult(
        mode=mode,
        reason=reason,
        version=version,
        wheels=wheels,
        provenance=prov,
        log_path=log_path,
        seconds=time.monotonic() - started,
        sha256={w.name: file_sha256(w) for w in wheels},
    )
    return res


BASE_WHEEL_COMMAND = "`forkpatch base-wheel` (then build-wheel takes it)"


def _say_why_container(base: BaseRef, fork_v: str, opts: BuildOptions) -> None:
    """auto mode on a Python-only series without a base wheel: the overlay path is
    the one that needs no Docker and no network; say so before the container build."""
    offline = (
        "it needs a Docker engine and installs its toolchain from the network"
        if opts.toolchain == "apt"
        else f"it needs a Docker engine (--toolchain {opts.toolchain})"
    )
    log.warn(
        "the series touches only Python files, but there is no base wheel of the fork's "
        f"{fork_v} ({base.describe()}) to overlay, so this is a container build from source: "
        f"{offline}. Without them, pass --base-wheel with the fork's wheel for the base, "
        f"or build a Python-only one with {BASE_WHEEL_COMMAND}; offline container builds "
        "take --toolchain wheels --wheelhouse DIR"
    )


def _overlay(
    project: Project,
    store: Any,
    head: str,
    touched: list[str],
    versions: tuple[str, str],
    base_wheel: Path,
    out_dir: Path,
    series: Series,
) -> tuple[list[Path], Provenance]:
    version, fork_v = versions
    if not base_wheel.is_file():
        raise BuildError(
            f"base wheel {base_wheel} does not exist",
            tip="download the fork's release wheel for the base tag",
        )
    replacements = wheel_replacements(store, head, touched)
    builder = BuilderInfo(mode="overlay", base_wheel_sha256=file_sha256(base_wheel))
    prov = expected_provenance(project, builder)
    with log.step(f"overlay {len(replacements)} file(s) onto {base_wheel.name}"):
        wheel = overlay_wheel(
            base_wheel,
            replacements=replacements,
            new_version=version,
            provenance=prov,
            out_dir=out_dir,
            extra_steps=build_steps(series),
            expected_fork_version=fork_v,
            expected_distribution=series.fork.distribution,
        )
    return [wheel], prov


def _container(
    project: Project,
    store: Any,
    head: str,
    version: str,
    out_dir: Path,
    series: Series,
    opts: BuildOptions,
) -> tuple[list[Path], Provenance, Path]:
    from forkpatch.wheels.container import CacheConfig, build_in_container

    cfg = series.build
    arch = opts.arch_list or cfg.arch_list or "7.0"
    base_image = opts.base_image or cfg.base_image or DEFAULT_BASE_IMAGE
    logs = project.state_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"build-{version}-{time.strftime('%Y%m%dT%H%M%S')}.log"
    entries = []
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
    cache = opts.cache
    if cache is None:
        cache_cfg = cfg.cache.as_mapping() if cfg.cache else {}
        cache = CacheConfig.from_mapping(cache_cfg) if cache_cfg else CacheConfig.from_env()
    with (
        tempfile.TemporaryDirectory(prefix="forkpatch-build-", dir=out_dir) as tmp,
        contextlib.ExitStack() as stack,
    ):
        tmp_dir = Path(tmp)
        raw_dir = tmp_dir / "raw"
        raw_dir.mkdir()
        resolved = dataclasses.replace(
            opts,
            out_dir=raw_dir,
            arch_list=arch,
            base_image=base_image,
            max_jobs=opts.max_jobs or cfg.max_jobs,
            cache=cache,
        )
        wheels = build_in_container(entries, resolved, version=version, log_path=log_path)
        builder = BuilderInfo(
            mode="container",
            image_id=_image_id(log_path),
            build_args={
                "TORCH_CUDA_ARCH_LIST": arch,
                "BASE_IMAGE": base_image,
                "FLASH_ATTN_V100_CUDA_ARCH_LIST": "7.0",
            },
        )
        prov = expected_provenance(project, builder)
        dist = series.fork.distribution.replace("-", "_").lower()
        final: list[Path] = []
        # Staged where commit_files takes its sources from (swept after a kill).
        stage = Path(tempfile.mkdtemp(prefix=".forkpatch-stage-", dir=out_dir))
        stack.callback(shutil.rmtree, stage, ignore_errors=True)
        for w in wheels:
            if w.name.lower().startswith(dist + "-"):
                final.append(
                    overlay_wheel(
                        w,
                        replacements={},
                        new_version=version,
                        provenance=prov,
                        out_dir=stage,
                        extra_steps=build_steps(series),
                    )
                )
            else:
                target = stage / w.name
                shutil.copy2(w, target)
                final.append(target)
        # The wheels and SHA256SUMS enter dist/ as one unit, as the overlay path's do.
        if out_dir.is_relative_to(project.root):
            project.commit(extra=dist_changes(out_dir, final))
        else:
            commit_dist(out_dir, final)
    return [out_dir / w.name for w in final], prov, log_path


def _image_id(log_path: Path) -> str | None:
    try:
        for line in reversed(
            log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-400:]
        ):
            if "builder image" in line and "sha256:" in line:
                return "sha256:" + line.split("sha256:", 1)[1].split()[0].rstrip(").,")
    except OSError:
        return None
    return None
