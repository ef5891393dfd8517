"""The gpu-jit tier: the fork's SM70 kernels as compute_70 PTX, JIT-compiled by the
driver of any GPU of capability 7.0 or newer; never counted as sm70."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from .layers import (
    assert_columns_seen,
    assert_within_tolerance,
    capability_floor_check,
    column_signal,
    dequant_weight,
    eager_block_cast_check,
    kernel_tolerance,
    padding_helpers_check,
    sm70_linear_check,
    sm70_unsupported_k_check,
    sm70_warmup_check,
)
from .ptxlib import PtxSm70Ops, fault_state
from .registry import BLOCK, ODD_WIDTH, Ctx, check, launch_argv, run_spec, this_copy
from .sm70ops import SM70_GROUP, Ops, cdiv, round_up

# --------------------------------------------------------------------------- gpu-jit tier
# The fork's own SM70 FP8 kernels as compute_70 PTX, JIT-compiled by the driver of any GPU
# of capability 7.0 or newer, in place of the fork's _C ops. What it cannot show, on a
# GPU other than a V100: sm_70 machine code (the V100's own compile of the PTX), V100
# timing, and the V100's kernel choice (for M <= 16 the fork picks a kernel by measuring
# on the GPU at hand). Its own tier: never counted as sm70.

JIT_NOT_COVERED = (
    "not covered: sm_70 SASS (the driver compiled the PTX for this GPU), V100 timing, "
    "the V100's kernel choice (M <= 16 is tuned by measuring on this GPU)"
)
# The kernel-level matrix: widths (4,120 padded to 4,224 as the patch pads it) x M.
JIT_WIDTHS = (ODD_WIDTH, 4096, 1024, 384)
JIT_M = (1, 3, 16, 64, 257)
JIT_K = 512

_PTX: PtxSm70Ops | None = None


def _ptx_ops() -> PtxSm70Ops:
    global _PTX
    if _PTX is None:
        _PTX = PtxSm70Ops(str(run_spec()["ptx_lib"]))
    _PTX.install()
    return _PTX


def _fp8_weight(n: int, k: int, padded: int, seed: int) -> tuple[Any, Any]:
    """A random e4m3 weight [padded, k] whose rows past n are +0.0, and fp32 block
    scales [padded/128, k/128], on the CPU."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    q = torch.zeros(padded, k, dtype=torch.float8_e4m3fn)
    q[:n] = (torch.randn(n, k, generator=gen) * 100).clamp(-448, 448).to(torch.float8_e4m3fn)
    s = torch.rand(cdiv(padded, BLOCK), cdiv(k, BLOCK), generator=gen) * 2e-3 + 1e-4
    return q, s


def _gemm(ops: Ops, x: Any, packed: list[Any], n: int) -> Any:
    import torch

    out = torch.full((x.size(0), n), float("nan"), dtype=torch.float16, device=x.device)
    weight, scales, meta = packed
    torch.ops._C.fp8_gemm_sm70_out(
        out, x, weight, scales, SM70_GROUP, int(meta[0]), int(meta[1]), False
    )
    return out


def _first_gemm_seconds(ops: Ops) -> float:
    import torch

    q, s = _fp8_weight(128, 128, 128, 1)
    packed = torch.ops._C.fp8_sm70_prepare(q.cuda(), s.cuda(), SM70_GROUP, False)
    x = torch.ones(1, 128, dtype=torch.float16, device="cuda")
    start = time.monotonic()
    _gemm(ops, x, packed, 128)
    torch.cuda.synchronize()
    return time.monotonic() - start


@check("gpu-jit.library", baseline=True)
def jit_library(ctx: Ctx) -> str:
    """The PTX library loads in place of the fork's _C ops: compute_70 PTX only (no
    machine code for any GPU), TurboMind shown 7.0 on this device, and the first GEMM
    (the driver's JIT compile of the PTX) completes."""
    import ctypes

    import torch

    ops = _ptx_ops()
    m = ops.manifest
    gencode = m.get("gencode") or []
    assert gencode == ["-gencode", "arch=compute_70,code=compute_70"], (
        f"the library was built for {gencode}, not compute_70 PTX alone"
    )
    cuobjdump = shutil.which("cuobjdump")
    sass = "not listed (no cuobjdump)"
    if cuobjdump:

        def listing(what: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [cuobjdump, f"--list-{what}", ops.path],
                capture_output=True,
                text=True,
                encoding="utf-8",
                errors="replace",
                check=False,
            )

        elf, ptx = listing("elf"), listing("ptx")
        assert "sm_" not in elf.stdout, f"the library holds machine code: {elf.stdout.strip()}"
        assert "sm_70" in ptx.stdout, f"no sm_70 PTX in the library: {ptx.stdout.strip()}"
        sass = f"{len(ptx.stdout.splitlines())} PTX file(s), no machine code"
    seen, real = ctypes.c_int(), ctypes.c_int()
    ops._call(ops.lib.fpsm70_capability(torch.cuda.current_device(), seen, real))
    assert seen.value == 70, f"TurboMind sees capability {seen.value}, want 70 (the wrap)"
    first = _first_gemm_seconds(ops)
    again = _first_gemm_seconds(ops)
    name = torch.cuda.get_device_name()
    fault = fault_state(ops.lib)
    warn = f"THE TEST-ONLY FAULT-SWITCH BUILD ({fault}); " if fault else ""
    return (
        f"{warn}fork {str(m['fork_commit'])[:12]}, {m.get('compiler')}: {sass}; on {name} "
        f"(sm_{real.value}) TurboMind sees 7.0; first GEMM {first:.1f} s (the driver's JIT "
        f"of the PTX, or its compute cache), next "
        f"{again:.3f} s; {JIT_NOT_COVERED}"
    )


@check("gpu-jit.capability-floor")
def jit_capability_floor(ctx: Ctx) -> str:
    """capability-floor through the PTX library, vLLM shown a (7, 0) device."""
    return capability_floor_check(_ptx_ops())


@check("gpu-jit.padding-helpers")
def jit_padding_helpers(ctx: Ctx) -> str:
    """odd-width-padding's helpers on the GPU."""
    return padding_helpers_check(_ptx_ops())


@check("gpu-jit.eager-block-cast")
def jit_eager_block_cast(ctx: Ctx) -> str:
    """eager-block-cast on the GPU, shown as (7, 0): the eager cast, never Triton's."""
    return eager_block_cast_check(_ptx_ops())


@check("gpu-jit.odd-width-linear")
def jit_odd_width_linear(ctx: Ctx) -> str:
    """A 4,120-row online fp8_per_block layer through the fork's kernels (as PTX):
    packed at load, one GEMM, sliced back, against the reference of its own cast."""
    return sm70_linear_check(_ptx_ops(), ODD_WIDTH, 256, 3, bias=False)


@check("gpu-jit.packed-repack")
def jit_packed_repack(ctx: Ctx) -> str:
    """packed-repack through the fork's kernels (as PTX): a 128-multiple layer with a
    bias, an odd one with a bias, and the K the GEMM cannot take kept fp16."""
    ops = _ptx_ops()
    a = sm70_linear_check(ops, 512, 384, 5, bias=True)
    b = sm70_linear_check(ops, 264, 128, 4, bias=True)
    return f"{a}; {b}; {sm70_unsupported_k_check(ops)}"


@check("gpu-jit.warmup")
def jit_warmup(ctx: Ctx) -> str:
    """The fork's own SM70 warmup over odd and 128-multiple layers, through the fork's
    kernels (as PTX); M <= 16 tuned by measuring on this GPU, not a V100."""
    return sm70_warmup_check(_ptx_ops())


@check("gpu-jit.kernel-matrix", baseline=True)
def jit_kernel_matrix(ctx: Ctx) -> str:
    """fp8_sm70_prepare + fp8_gemm_sm70_out over N in {4,120 padded to 4,224, 4,096,
    1,024, 384} x M in {1, 3, 16, 64, 257}: each element within the tolerance of a
    float64 reference of the same e4m3 weights (from the reference's own rounding),
    padded columns exactly 0, a repeated call bit-identical."""
    return kernel_matrix_check(_ptx_ops())


def kernel_matrix_check(ops: Ops) -> str:
    """The kernel matrix on ``ops`` (the PTX library's, or stand-ins on the CPU)."""
    import torch

    rows = []
    worst = worst_ratio = 0.0
    for n in JIT_WIDTHS:
        padded = round_up(n, BLOCK)
        q, s = _fp8_weight(n, JIT_K, padded, seed=n)
        packed = torch.ops._C.fp8_sm70_prepare(
            q.to(ops.device), s.to(ops.device), SM70_GROUP, False
        )
        w16 = dequant_weight(q[:n], s)
        errs = []
        signal = torch.zeros(n, dtype=torch.float64)
        for m in JIT_M:
            gen = torch.Generator().manual_seed(m * 7 + n)
            x = (torch.randn(m, JIT_K, generator=gen) * 0.5).to(torch.float16)
            out = _gemm(ops, x.to(ops.device), packed, padded)
            again = _gemm(ops, x.to(ops.device), packed, padded)
            assert torch.equal(out, again), f"N={n} M={m}: a repeated call is not bit-identical"
            got = out.cpu()
            assert not got[:, n:].any(), f"N={n} M={m}: padded columns {n}..{padded} are not 0"
            exact, tol = kernel_tolerance(x, w16)
            ref = exact.to(torch.float16)
            err = float((got[:, :n].float() - ref.float()).abs().max())
            ratio = assert_within_tolerance(
                got[:, :n], ref, tol, exact, f"N={n} M={m}", columns_seen=False
            )
            signal = torch.maximum(signal, column_signal(exact, tol))
            errs.append(f"M={m}: {err:.3g}")
            worst, worst_ratio = max(worst, err), max(worst_ratio, ratio)
        assert_columns_seen(signal, f"N={n}")
        label = f"N={n}" + (f" (padded {padded})" if padded != n else "")
        rows.append(f"{label} {', '.join(errs)}")
    return (
        f"K={JIT_K}, max abs error {worst:.3g} ({worst_ratio:.2g} x its tolerance at worst); "
        + "; ".join(rows)
    )


@check("gpu-jit.refusals", baseline=True)
def jit_refusals(ctx: Ctx) -> str:
    """The ops refuse what the fork's glue refuses, with its messages; and K % 16 == 8
    (which prepare takes) finds no SM70 kernel: TurboMind aborts the process (a probe
    process of its own)."""
    import torch

    _ptx_ops()
    c = torch.ops._C
    q, s = _fp8_weight(4224, 256, 4224, 3)
    q, s = q.cuda(), s.cuda()
    packed = c.fp8_sm70_prepare(q, s, SM70_GROUP, False)
    x = torch.ones(3, 256, dtype=torch.float16, device="cuda")
    q260, s260 = _fp8_weight(256, 260, 256, 6)

    def gemm(out: Any, xx: Any, p: list[Any]) -> None:
        c.fp8_gemm_sm70_out(out, xx, p[0], p[1], SM70_GROUP, int(p[2][0]), int(p[2][1]), False)

    half = dict(dtype=torch.float16, device="cuda")
    cases: list[tuple[str, Callable[[], Any]]] = [
        (
            "fp8_sm70_prepare: K and N must be multiples of 8.",
            lambda: c.fp8_sm70_prepare(q260.cuda(), s260.cuda(), SM70_GROUP, False),
        ),
        (
            "fp8_sm70_prepare: qweight must be float8_e4m3fn.",
            lambda: c.fp8_sm70_prepare(q.to(torch.float16), s, SM70_GROUP, False),
        ),
        (
            "fp8_sm70_prepare: output scale block mismatch.",
            lambda: c.fp8_sm70_prepare(q, s[:-1], SM70_GROUP, False),
        ),
        (
            "fp8_gemm_sm70: output cols must match weight output dim.",
            lambda: gemm(torch.empty(3, ODD_WIDTH, **half), x, packed),
        ),
        ("fp8_gemm_sm70: input must be float16.", lambda: gemm(torch.empty(3, 4224, **half), x.float(), packed)),
    ]  # fmt: skip
    for message, call in cases:
        try:
            call()
            torch.cuda.synchronize()
        except RuntimeError as exc:
            assert message in str(exc), f"want {message!r}, got {exc}"
        else:
            raise AssertionError(f"accepted a call the fork's glue refuses with {message!r}")
    rc, text = _run_probe(_probe_argv("no_kernel_probe"), 240)
    assert rc != 0 and "No feasible kernel found for the problem" in text, (
        f"a K=264 GEMM did not fail as TurboMind does (exit {rc}): {text[-1500:]}"
    )
    return (
        f"{len(cases)} refusals with the glue's messages; a K=264 GEMM (prepare takes it) "
        f"aborts the process (exit {rc}): No feasible kernel found for the problem"
    )


def _probe_argv(probe: str) -> list[str]:
    """A process of its own running ``probe`` (one of :data:`PROBES`) with the library,
    isolated as this one is (the check process in the smoke venv is)."""
    root, package = this_copy()
    lib = str(run_spec()["ptx_lib"])
    module = f"{package}.gpujit"
    return launch_argv(sys.executable, root, module, lib, probe, isolated=bool(sys.flags.isolated))


def no_kernel_probe() -> dict[str, Any]:
    """A GEMM with K = 264 (K % 16 == 8): TurboMind finds no kernel."""
    import torch

    ops = _ptx_ops()
    q, s = _fp8_weight(256, 264, 256, 4)
    packed = torch.ops._C.fp8_sm70_prepare(q.cuda(), s.cuda(), SM70_GROUP, False)
    x = torch.ones(3, 264, dtype=torch.float16, device="cuda")
    out = _gemm(ops, x, packed, 256)
    torch.cuda.synchronize()
    return {"computed": bool(out.isfinite().all())}


def unpadded_probe() -> dict[str, Any]:
    """The 4,120-wide weight packed without padding (what the patch prevents): which of
    its output columns come out wrong. Runs in a process of its own (it writes past a
    buffer)."""
    import torch

    ops = _ptx_ops()
    q, s = _fp8_weight(ODD_WIDTH, 256, ODD_WIDTH, 5)
    packed = torch.ops._C.fp8_sm70_prepare(q.cuda(), s.cuda(), SM70_GROUP, False)
    gen = torch.Generator().manual_seed(11)
    x = (torch.randn(3, 256, generator=gen) * 0.5).to(torch.float16)
    out = _gemm(ops, x.cuda(), packed, ODD_WIDTH).cpu().double()
    exact, tol = kernel_tolerance(x, dequant_weight(q, s))
    ref = exact.to(torch.float16).double()
    bad = ((out - ref).abs() > tol) | out.isnan()
    cols = [int(i) for i in bad.any(0).nonzero().flatten()]
    return {"wrong_columns": len(cols), "first": cols[:5], "last": cols[-3:]}


PROBES: dict[str, Callable[[], dict[str, Any]]] = {
    "no_kernel_probe": no_kernel_probe,
    "unpadded_probe": unpadded_probe,
}


def main() -> int:
    """The probe process (:func:`_probe_argv`): ``LIB PROBE``; the probe's result on
    stdout, as one ``PROBE {json}`` line."""
    lib, probe = sys.argv[1:3]
    run_spec()["ptx_lib"] = lib
    print("PROBE " + json.dumps(PROBES[probe]()), flush=True)
    return 0


def _run_probe(
    argv: list[str], timeout: float, env: dict[str, str] | None = None
) -> tuple[int, str]:
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            timeout=timeout,
            check=False,
            env={**os.environ, **(env or {})},
        )
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {timeout:.0f} s"
    return proc.returncode, proc.stdout + proc.stderr


@check("gpu-jit.unpadded-width", baseline=True)
def jit_unpadded_width(ctx: Ctx) -> str:
    """The negative case: a 4,120-wide weight packed unpadded (N % 32 != 0) makes
    fp8_sm70_prepare write past its buffer (compute-sanitizer, where it runs) and the
    GEMM's output wrong, so the patch's padding is needed."""
    argv = _probe_argv("unpadded_probe")
    rc, text = _run_probe(argv, 300)
    line = next((ln for ln in text.splitlines() if ln.startswith("PROBE ")), None)
    assert line is not None, f"the unpadded probe did not report (exit {rc}): {text[-1500:]}"
    probe = json.loads(line[len("PROBE ") :])
    assert probe["wrong_columns"] > 0, (
        f"an unpadded {ODD_WIDTH}-wide weight computed every column right: the reason "
        "for the patch's padding does not hold on this build"
    )
    detail = (
        f"unpadded N={ODD_WIDTH}: {probe['wrong_columns']} of {ODD_WIDTH} columns wrong "
        f"(first {probe['first']}, last {probe['last']})"
    )
    sanitizer = shutil.which("compute-sanitizer")
    if sanitizer is None:
        return detail + "; compute-sanitizer not on PATH: the out-of-bounds write not shown"
    # Every tensor its own allocation: inside torch's cached segments a write past a
    # tensor lands in memory the sanitizer sees as allocated.
    no_cache = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    rc, text = _run_probe([sanitizer, "--tool", "memcheck", *argv], 240, no_cache)
    summary = re.search(r"ERROR SUMMARY: (\d+) error", text)
    if summary is None:
        return detail + f"; compute-sanitizer did not run here (exit {rc}): {text.strip()[-300:]}"
    writes = re.findall(r"Invalid __global__ write of size \d+ bytes\s*\n=*\s*at (.+)", text)
    kernels = sorted({re.sub(r"^void\s+", "", w).split("<")[0].split("(")[0] for w in writes})
    assert int(summary.group(1)) > 0, (
        f"{detail}; but compute-sanitizer found no error in the unpadded prepare: "
        f"{text.strip()[-600:]}"
    )
    return detail + (
        f"; compute-sanitizer: {summary.group(1)} errors, {len(writes)} invalid global "
        f"writes in {', '.join(kernels) or '?'}"
    )
