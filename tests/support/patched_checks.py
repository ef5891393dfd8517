"""Checks of the patched 1Cat-vLLM *source tree* (patches capability-floor,
odd-width-padding, eager-block-cast, packed-repack and cli-version).

A thin runner over the smoke suite's own check logic: the checks are the
helpers of ``forkpatch.smoke.incheck`` (``capability_floor_check``,
``padding_helpers_check``, ``eager_block_cast_check``, ``sm70_linear_check``,
``sm70_unsupported_k_check``, ``sm70_warmup_check`` (the fork's own SM70 warmup over the
patched layers) with ``ReferenceSm70Ops`` (CPU stand-ins as strict as the
kernels) / ``RealSm70Ops``), so the opt-in real-fork tests and
``forkpatch smoke`` exercise one implementation. Only ``cli-version`` is
specific to a checkout (there is no installed ``vllm`` console script to run:
the CLI's ``main()`` is called in process with the metadata stood in).

This file runs *inside* a Python process whose sys.path starts with a patched
checkout of the fork (tests/patchset/test_patch_set.py starts it as a
subprocess), so it imports the fork's ``vllm`` and torch freely. The incheck package
is imported from this checkout's src/ (it is standalone by design: standard library at
import time, so it runs on the fork's Python as it does in the smoke venv).

Command line: ``python patched_checks.py {reference|real|gpu-like[:FAULT][+cpu-cast-reference]}
[CHECK...]``; prints
one ``PASS <check>`` line per check and exits non-zero on the first failure
(a check that cannot run here, incheck's ``NotRun``, is a failure too).
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[2] / "src"


def _load_incheck() -> Any:
    """This checkout's incheck package (forkpatch's src/ first on sys.path: the process
    may have another forkpatch installed)."""
    if str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))
    return importlib.import_module("forkpatch.smoke.incheck")


incheck = _load_incheck()
ODD_WIDTH = incheck.ODD_WIDTH
Ops = Any  # incheck.ReferenceSm70Ops | incheck.RealSm70Ops


def check_cli_version(ops: Ops) -> None:
    """`vllm --version` prints vllm.version.__version__ and run-batch reads it
    too, while importlib.metadata knows no `vllm` distribution (the wheel
    installs as 1cat-vllm). Run it in a fresh process: with reference ops
    it also stands in the `1cat-vllm` metadata (with the `+cpu` suffix a CPU
    build carries) before vllm detects its platform."""
    import importlib.metadata
    import inspect
    import io

    real_version = importlib.metadata.version
    fake_dist: dict[str, str] = {}
    if isinstance(ops, incheck.ReferenceSm70Ops):
        import vllm.version

        fake_dist["1cat-vllm"] = f"{vllm.version.__version__}+cpu"

    def no_vllm_dist(name: str) -> str:
        if name == "vllm":
            raise importlib.metadata.PackageNotFoundError(name)
        return fake_dist[name] if name in fake_dist else real_version(name)

    out = io.StringIO()
    with (
        incheck.patched(importlib.metadata, "version", no_vllm_dist),
        incheck.patched(sys, "argv", ["vllm", "--version"]),
        contextlib.redirect_stdout(out),
    ):
        import vllm.entrypoints.cli.main as cli_main
        from vllm.entrypoints.cli import run_batch
        from vllm.version import __version__

        for mod in (cli_main, run_batch):
            assert 'metadata.version("vllm")' not in inspect.getsource(mod), mod
            assert __version__ == mod.VLLM_VERSION, mod
        try:
            cli_main.main()
        except SystemExit as e:
            assert e.code in (0, None), e.code
    assert out.getvalue().strip() == __version__, out.getvalue()


CHECKS: dict[str, Callable[[Ops], Any]] = {
    "capability-floor": incheck.capability_floor_check,
    "padding-helpers": incheck.padding_helpers_check,
    "eager-block-cast": incheck.eager_block_cast_check,
    # A 4,120-row layer: padded to 4,224 rows, packed, GEMM sliced back.
    "sm70-linear-odd-width": lambda ops: incheck.sm70_linear_check(
        ops, ODD_WIDTH, 256, 3, bias=False
    ),
    # A 128-multiple width (no padding), without and with a bias.
    "sm70-linear-block-width": lambda ops: (
        incheck.sm70_linear_check(ops, 512, 384, 5, bias=False),
        incheck.sm70_linear_check(ops, 512, 384, 5, bias=True),
    ),
    # An odd width with a bias: the bias is added after slicing.
    "sm70-linear-odd-width-bias": lambda ops: incheck.sm70_linear_check(
        ops, 264, 128, 4, bias=True
    ),
    # A K the SM70 GEMM cannot take: the layer keeps fp16 weights, named in a warning.
    "unsupported-k": incheck.sm70_unsupported_k_check,
    # The fork's own SM70 warmup over patched layers (odd and 128-multiple widths,
    # with and without a bias, and an fp16-fallback layer).
    "sm70-warmup": incheck.sm70_warmup_check,
    "cli-version": check_cli_version,
}

# Checks that must start from a fresh interpreter (platform detection).
SEPARATE_PROCESS = {"cli-version"}


def _cpu_cast_reference(w: Any, cast: tuple[Any, Any]) -> tuple[Any, Any]:
    """The old reference (a negative control): the CPU's cast of the fp16 weight, not the
    layer's own."""
    from vllm.utils.deep_gemm import _per_block_cast_to_fp8_eager

    q, s = _per_block_cast_to_fp8_eager(w.cpu(), [128, 128], False)
    padded = incheck.layers.round_up(q.shape[0], 128)
    full = q.new_zeros((padded, q.shape[1]))
    full[: q.shape[0]] = q
    return full, s


def _ops(kind: str) -> Ops:
    """reference | real | gpu-like[:FAULT][+cpu-cast-reference] (the negative controls:
    the stand-ins accumulating in fp32 as a GPU does, with one fault of the PTX library's
    switch, or the old reference of the CPU's cast)."""
    if kind == "reference":
        return incheck.ReferenceSm70Ops()
    if kind == "real":
        return incheck.RealSm70Ops()
    kind, _, extra = kind.partition("+")
    name, _, fault = kind.partition(":")
    assert name == "gpu-like" and extra in ("", "cpu-cast-reference"), kind
    if extra:
        incheck.layers.reference_cast = _cpu_cast_reference
    return incheck.GpuLikeSm70Ops(fault)


def main(argv: list[str]) -> int:
    each = "--each" in argv  # run every check, one FAIL line per failure, instead of stopping
    kind, *names = [a for a in argv if a != "--each"]
    ops: Ops = _ops(kind)
    # Register the ops before vllm._sm70_ops is imported, as a build would.
    ops.install()
    failed = 0
    for name in names or [c for c in CHECKS if c not in SEPARATE_PROCESS]:
        if not each:
            CHECKS[name](ops)
            print(f"PASS {name}", flush=True)
            continue
        try:
            CHECKS[name](ops)
        except AssertionError as exc:
            failed += 1
            print(f"FAIL {name}: " + " ".join(str(exc).split()), flush=True)
        else:
            print(f"PASS {name}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
