"""Which builder makes the wheels, and why: `choose_builder` is pure (no Docker, no
log), so every branch of the choice is held here on a real build context (the example
project's series applied in memory), varied in what matters: the compiled files the
series touches, whether a base wheel is configured, the mode asked for."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from forkpatch.errors import BuildError
from forkpatch.example import build_release_wheel
from forkpatch.project import Project
from forkpatch.wheels.buildwheel import (
    NO_BASE_WHEEL,
    OVERLAY_FITS,
    BuildContext,
    ContainerBuilder,
    OverlayBuilder,
    build_context,
    choose_builder,
    requested_mode,
)
from forkpatch.wheels.options import BuildOptions

KERNELS = ("benchmarks/b.cu", "setup.py", "csrc/ops.cu", "csrc/attention.cu")


@pytest.fixture
def ctx(example_project, tmp_path) -> BuildContext:
    """The example series' context, with a base wheel configured (it need not exist:
    the choice reads only whether one is configured)."""
    root, _run = example_project
    given = tmp_path / "release" / "1cat_vllm-1.2.1-py3-none-any.whl"
    return build_context(Project(root), BuildOptions(base_wheel=given))


def test_the_context_holds_what_the_choice_reads(ctx: BuildContext, tmp_path: Path):
    assert ctx.compiled == ()  # the example series touches Python files only
    assert ctx.touched and all(p.endswith(".py") for p in ctx.touched)
    assert ctx.base_wheel == tmp_path / "release" / "1cat_vllm-1.2.1-py3-none-any.whl"
    assert ctx.version.startswith("1.2.1+fp.") and ctx.fork_version == "1.2.1"
    assert ctx.out_dir == (ctx.project.root / "dist").resolve() and ctx.out_dir.is_dir()


def test_a_context_counts_the_compiled_files_of_the_series(example_project, example_fork, tmp_path):
    root, run = example_project
    wt = tmp_path / "wt"
    subprocess.run(["git", "clone", "-q", str(example_fork.path), str(wt)], check=True)
    subprocess.run(["git", "-C", str(wt), "checkout", "-q", "v1.2.1"], check=True)
    (wt / "csrc" / "ops.cu").write_text("// faster\n__global__ void noop() {}\n")
    diff = subprocess.run(["git", "-C", str(wt), "diff"], check=True, capture_output=True).stdout
    (tmp_path / "kernel.patch").write_bytes(b"Tweak the kernel.\n\n" + diff)
    run("import", str(tmp_path / "kernel.patch"))
    got = build_context(Project(root), BuildOptions())
    assert got.compiled == ("csrc/ops.cu",) and got.base_wheel is None
    builder, why = choose_builder(got, "auto")
    assert builder == ContainerBuilder() and why == "the series touches compiled code (csrc/ops.cu)"


def test_auto_takes_the_overlay_when_it_fits(ctx: BuildContext):
    builder, why = choose_builder(ctx, "auto")
    assert builder == OverlayBuilder() and builder.mode == "overlay"
    assert (
        why == OVERLAY_FITS == "the series touches only Python files and a base wheel is configured"
    )


@pytest.mark.parametrize("base_wheel", [True, False], ids=["with a base wheel", "without"])
def test_auto_takes_the_container_for_compiled_code_naming_the_first_three(
    ctx: BuildContext, base_wheel: bool
):
    ctx = dataclasses.replace(
        ctx, compiled=KERNELS, base_wheel=ctx.base_wheel if base_wheel else None
    )
    builder, why = choose_builder(ctx, "auto")
    # Compiled code needs the container whatever the base wheel: no "for want of one".
    assert builder == ContainerBuilder(for_want_of_base_wheel=False)
    assert builder.mode == "container"
    assert why == "the series touches compiled code (csrc/ops.cu, csrc/attention.cu, setup.py)"


def test_auto_takes_the_container_for_want_of_a_base_wheel_and_says_so(ctx: BuildContext):
    builder, why = choose_builder(dataclasses.replace(ctx, base_wheel=None), "auto")
    assert builder == ContainerBuilder(for_want_of_base_wheel=True)
    assert why == NO_BASE_WHEEL == "no base wheel is configured (--base-wheel)"


@pytest.mark.parametrize(
    ("compiled", "base_wheel"),
    [((), True), ((), False), (KERNELS, True), (KERNELS, False)],
    ids=["python, base wheel", "python, none", "compiled, base wheel", "compiled, none"],
)
def test_a_container_asked_for_is_taken_whatever_the_series(
    ctx: BuildContext, compiled: tuple[str, ...], base_wheel: bool
):
    ctx = dataclasses.replace(
        ctx, compiled=compiled, base_wheel=ctx.base_wheel if base_wheel else None
    )
    assert choose_builder(ctx, "container") == (ContainerBuilder(), "requested")


def test_an_overlay_asked_for_is_taken_when_it_fits(ctx: BuildContext):
    assert choose_builder(ctx, "overlay") == (OverlayBuilder(), "requested")


@pytest.mark.parametrize("base_wheel", [True, False], ids=["with a base wheel", "without"])
def test_an_overlay_asked_for_refuses_compiled_code_naming_it(ctx: BuildContext, base_wheel):
    ctx = dataclasses.replace(
        ctx, compiled=KERNELS, base_wheel=ctx.base_wheel if base_wheel else None
    )
    with pytest.raises(BuildError) as err:
        choose_builder(ctx, "overlay")
    assert err.value.message.startswith(
        "an overlay build cannot include changes to compiled code; the series touches "
        "compiled into the wheel: csrc/ops.cu, csrc/attention.cu"
    )
    assert err.value.tip == "build with --mode container"


def test_an_overlay_asked_for_without_a_base_wheel_says_where_one_comes_from(ctx: BuildContext):
    with pytest.raises(BuildError) as err:
        choose_builder(dataclasses.replace(ctx, base_wheel=None), "overlay")
    assert err.value.message == "an overlay build needs the fork's wheel for v1.2.1 (1.2.1)"
    assert err.value.tip is not None
    assert "--base-wheel PATH" in err.value.tip and "`forkpatch base-wheel`" in err.value.tip


@pytest.mark.parametrize(
    ("given", "configured", "want"),
    [
        ("auto", None, "auto"),
        ("auto", "container", "container"),
        ("auto", "overlay", "overlay"),
        ("overlay", "container", "overlay"),  # the option over series.yaml
        ("container", "overlay", "container"),
        ("container", None, "container"),
    ],
)
def test_the_option_comes_before_build_mode_in_series_yaml(given, configured, want):
    assert requested_mode(BuildOptions(mode=given), configured) == want


def test_an_unknown_mode_is_refused_naming_the_modes():
    with pytest.raises(BuildError, match="unknown build mode 'wheel'") as err:
        requested_mode(BuildOptions(mode="wheel"), None)  # type: ignore[arg-type]
    assert err.value.tip == "use one of auto, overlay, container"


def test_a_container_mode_from_series_yaml_is_not_called_auto(
    example_project, example_fork, tmp_path, monkeypatch
):
    """build.mode: container without a base wheel is asked for, not auto's choice for
    want of a base wheel: the failure does not say auto chose it."""
    root, run = example_project
    with (root / "series.yaml").open("a", encoding="utf-8") as fh:
        fh.write("build:\n  mode: container\n")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    _, _, err = run("build-wheel", expect=1)
    assert "build mode: container (requested)" in err and "no Docker engine" in err
    assert "auto mode built in a container" not in err
    assert "there is no base wheel of the fork's" not in err
    # The command line over series.yaml: an overlay asked for is an overlay.
    base = build_release_wheel(example_fork.path, "v1.2.1", tmp_path / "release")
    _, _, err = run("build-wheel", "--mode", "overlay", "--base-wheel", str(base))
    assert "build mode: overlay (requested)" in err
