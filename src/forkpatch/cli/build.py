"""`forkpatch build-wheel` and `forkpatch verify`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from forkpatch import log
from forkpatch.cli import options
from forkpatch.cli.context import Ctx, pass_ctx
from forkpatch.errors import VerifyMismatch
from forkpatch.kinds import TOOLCHAINS, BuildMode, Toolchain

if TYPE_CHECKING:
    from forkpatch.wheels.buildwheel import BuildResult
    from forkpatch.wheels.options import BuildOptions
    from forkpatch.wheels.verify import VerifyReport


@click.command(name="build-wheel")
@options.build_mode("--mode", "mode", default="auto")
@options.base_wheel(for_what="for the base tag (overlay mode)")
@click.option(
    "-o",
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Output directory (default: build.dist-dir or dist/).",
)
@click.option("--arch-list", help="TORCH_CUDA_ARCH_LIST (default: build.arch-list or 7.0).")
@click.option("--base-image", help="Base image of the builder (default: CUDA 12.8 devel).")
@click.option(
    "--toolchain",
    type=click.Choice(TOOLCHAINS),
    default="apt",
    show_default=True,
    help="How the builder image gets Python packages: apt (nvidia/cuda devel base, "
    "deadsnakes, PyTorch index; network), wheels (hash-pinned PyPI wheels of "
    "ci/cuda-wheels.lock; offline with --wheelhouse), none (the base has everything).",
)
@click.option(
    "--no-toolchain-install",
    is_flag=True,
    help="Same as --toolchain none.",
)
@click.option(
    "--wheelhouse",
    help="wheels toolchain: a directory of the locked wheels (served to the image "
    "build on the host's loopback) or a --find-links URL. Default: PyPI.",
)
@click.option("--python-version", help="The builder's Python (default 3.12).")
@click.option(
    "--fork-source",
    "fork_sources",
    multiple=True,
    metavar="VAR=DIR",
    help="A local copy of a dependency the fork's CMake downloads, e.g. "
    "VLLM_CUTLASS_SRC_DIR=../cutlass (repeatable).",
)
@click.option("--max-jobs", type=int, help="MAX_JOBS (default: sized to the engine host).")
@options.as_json("Machine-readable result")
@pass_ctx
def build_wheel_cmd(
    c: Ctx,
    mode: BuildMode,
    base_wheel: Path | None,
    out_dir: Path | None,
    arch_list: str | None,
    base_image: str | None,
    toolchain: Toolchain,
    no_toolchain_install: bool,
    wheelhouse: str | None,
    python_version: str | None,
    fork_sources: tuple[str, ...],
    max_jobs: int | None,
    as_json: bool,
) -> None:
    """Build the patched fork's wheel(s) into dist/ with a SHA256SUMS."""
    from forkpatch.wheels.options import BuildOptions

    sources = _fork_sources(fork_sources)
    opts = BuildOptions(
        mode=mode,
        base_wheel=base_wheel,
        out_dir=out_dir,
        arch_list=arch_list,
        base_image=base_image,
        toolchain="none" if no_toolchain_install else toolchain,
        wheelhouse=_wheelhouse(wheelhouse),
        python_version=python_version,
        sources=sources,
        max_jobs=max_jobs,
    )
    _show_build(_build(c, opts), as_json)


def _fork_sources(items: tuple[str, ...]) -> dict[str, Path]:
    """--fork-source VAR=DIR, each DIR made absolute."""
    sources = {}
    for item in items:
        var, sep, path = item.partition("=")
        if not sep or not var or not path:
            raise click.BadParameter(f"{item!r} is not VAR=DIR", param_hint="--fork-source")
        sources[var] = Path(path).resolve()
    return sources


def _wheelhouse(wheelhouse: str | None) -> str | Path | None:
    """--wheelhouse: a URL as it is, a directory made absolute."""
    if wheelhouse is None or "://" in wheelhouse:
        return wheelhouse
    return Path(wheelhouse).resolve()


def _build(c: Ctx, opts: BuildOptions) -> BuildResult:
    """The build under the project's lock, with a warning where dist/ is not ignored."""
    from forkpatch.ops import warn_if_not_ignored
    from forkpatch.wheels.buildwheel import build_wheel, dist_dir

    with c.locked_project() as project:
        out = dist_dir(project, opts)
        if out.is_relative_to(project.root):
            warn_if_not_ignored(project.root, out)
        return build_wheel(project, opts)


def _show_build(result: BuildResult, as_json: bool) -> None:
    """The wheels built (stderr beside --json, which is then alone on stdout)."""
    say = log.info if as_json else log.result
    for w in result.wheels:
        say(f"built {w} ({result.sha256[w.name][:16]}...)")
    if result.log_path:
        say(f"full build log: {result.log_path}")
    say(f"version {result.version}, {result.mode} build in {result.seconds:.1f}s")
    if as_json:
        log.emit_json(result.to_json())


@click.command(name="base-wheel")
@click.option(
    "--onto",
    metavar="REF",
    help="A tag, branch or commit of the fork instead of the series' base "
    "(for `droppable --onto REF`).",
)
@click.option(
    "--python",
    metavar="PYTHON",
    help="The interpreter with the fork's build toolchain (default: forkpatch's own).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable result on stdout.")
@pass_ctx
def base_wheel_cmd(c: Ctx, onto: str | None, python: str | None, as_json: bool) -> None:
    """Build the fork's Python-only wheel at the series' base (or REF), for overlay builds.

    The fork's own setup.py with VLLM_TARGET_DEVICE=empty: no compiled code, the
    version forkpatch counts for the commit. Kept in .forkpatch/base-wheels/<commit>/,
    where build-wheel and droppable find it when given no base wheel. Prints its path.
    """
    from forkpatch.wheels.basewheel import build_base_wheel

    with c.locked_project() as project:
        result = build_base_wheel(project, onto=onto, python=python)
    if as_json:
        log.emit_json(result.to_json())
    else:
        log.result(str(result.path))


@click.command()
@click.argument("wheel", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable result on stdout.")
@pass_ctx
def verify(c: Ctx, wheel: Path, as_json: bool) -> None:
    """Check a wheel's RECORD hashes and whether it matches the current series.

    In a project, a wheel without forkpatch provenance (the fork's own, another
    project's) is a mismatch (exit 1); outside one only the RECORD is checked.
    """
    from forkpatch.wheels.verify import verify_wheel

    report = verify_wheel(wheel)
    differences = _series_differences(c, report)
    _show_verify(wheel, report, differences, as_json)
    if not report.ok or differences:
        raise VerifyMismatch(str(wheel))


def _series_differences(c: Ctx, report: VerifyReport) -> list[str] | None:
    """How the wheel differs from the current series (None outside a project)."""
    from forkpatch.wheels.buildwheel import expected_provenance, series_wheel_files
    from forkpatch.wheels.verify import content_differences, matches_series

    try:
        project = c.project()
    except Exception:
        return None
    if report.provenance is None:
        # In a project the question is "is this the series' wheel?": a wheel
        # without provenance (the fork's base wheel, another project's) is not.
        return [
            (
                "it carries no forkpatch provenance, so it was not built from this "
                "series (the fork's own wheel, or another project's?)"
            )
        ]
    expected = expected_provenance(project, report.provenance.builder)
    differences = matches_series(report, expected)
    if report.provenance.builder.mode == "overlay" and not differences:
        # The bytes, not only the metadata: the series re-applied in memory.
        changed, tree = series_wheel_files(project)
        differences = content_differences(report, changed, tree)
    return differences


def _show_verify(
    wheel: Path, report: VerifyReport, differences: list[str] | None, as_json: bool
) -> None:
    """The RECORD check and the comparison with the series (JSON on stdout, or the
    human lines on stderr; the exit status is the result)."""
    if as_json:
        log.emit_json(
            {
                "wheel": str(wheel),
                "version": report.version,
                "record_ok": report.ok,
                "problems": report.problems(),
                "provenance": report.provenance.to_dict() if report.provenance else None,
                "matches_series": None if differences is None else not differences,
                "differences": differences or [],
                "notes": report.notes,
            }
        )
        return
    log.info(f"{wheel.name}: version {report.version}, {report.members} members")
    log.info("RECORD: ok" if report.ok else "RECORD: FAILED")
    for p in report.problems():
        log.info(f"  - {p}")
    for n in report.notes:
        log.info(f"note: {n}")
    if report.provenance is None:
        log.info(
            "provenance: none (not built by forkpatch)"
            + ("; so it does NOT match the current series" if differences else "")
        )
    elif differences is None:
        log.info("provenance: present (no series here to compare with)")
    elif differences:
        log.info("provenance: does NOT match the current series:")
        for d in differences:
            log.info(f"  - {d}")
    else:
        log.info("provenance: matches the current series")
