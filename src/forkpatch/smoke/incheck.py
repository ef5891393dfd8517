"""The smoke checks themselves, run *inside* the isolated smoke environment.

This file is copied into the smoke venv and executed there with the venv's
interpreter (``python -I incheck.py --spec SPEC --out RESULTS``), so the
forkpatch source tree is never on ``sys.path`` and ``vllm`` can only come from
the installed wheel. It must therefore stay standalone: standard library at
import time, ``torch`` (and the fork's ``vllm``) imported lazily inside the
checks that need them. forkpatch itself imports this module only to read
:data:`REGISTRY` (ids, tiers, needs, summaries), so there is one list of checks.

Adding a check: write a function taking a :class:`Ctx`, decorate it with
``@check("tier.name", needs=(...))``, raise ``AssertionError`` for a failure
and :class:`NotRun` when the check cannot run here. ``baseline=True`` runs it
for every wheel; otherwise it runs when a patch lists it under ``smoke:``.

The SM70 checks and their ``static.*-cpu`` twins share one implementation: the
twin passes :class:`ReferenceSm70Ops` (CPU stand-ins for the fork's SM70 ops,
registered with torch.library under their real schemas, capability mocked to
7.0), the SM70 check :class:`RealSm70Ops` (the wheel's compiled ops on a real
7.0 device). The stand-ins are as strict as the kernels (every check they make,
with their messages, plus the rules they rely on unchecked), keep the packed
weight and the (k_ld, q_ld) meta opaque, and dequantize in fp16 as the kernel
does, so that what passes on the CPU would pass on a V100. The fork's own SM70
warmup runs over the patched layers in both. That is how CI exercises the patch
set's logic without a V100.

Results are written as JSON lines to ``--out``, one per check, flushed as each
finishes, so a crash (a CUDA fault kills the process) loses only the check
that was running.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

BLOCK = 128
# Qwen3.5's fused in_proj_qkvz per rank at TP4: (16,384 + 96) / 4.
ODD_WIDTH = 4120
SM70 = (7, 0)
PROVENANCE_FILENAME = "forkpatch-provenance.json"

TIERS = ("static", "gpu", "sm70", "gpu-jit")
# What each --tier runs: cumulative up to sm70; gpu-jit is its own tier beside sm70 (the
# fork's kernels as PTX on any GPU of capability 7.0 or newer), never a stand-in for it.
TIER_RUNS = {
    "static": ("static",),
    "gpu": ("static", "gpu"),
    "sm70": ("static", "gpu", "sm70"),
    "gpu-jit": ("static", "gpu", "gpu-jit"),
}
# The lowest capability whose driver can JIT-compile the library's compute_70 PTX.
JIT_MIN_CAPABILITY = (7, 0)

# Outcomes. "not-run" is never a pass: it always carries the reason.
PASSED, FAILED, NOT_RUN, ERROR = "passed", "failed", "not-run", "error"


class NotRun(Exception):
    """The check cannot run in this environment (the reason is the message)."""


@dataclass(frozen=True)
class CheckDef:
    id: str
    tier: str
    func: Callable[[Ctx], str | None]
    needs: tuple[str, ...] = ()  # "torch", "cuda", "sm70", "jit"
    baseline: bool = False
    summary: str = ""


REGISTRY: dict[str, CheckDef] = {}


def check(
    check_id: str, *, needs: tuple[str, ...] = (), baseline: bool = False
) -> Callable[[Callable[[Ctx], str | None]], Callable[[Ctx], str | None]]:
    """Register a check under ``check_id`` ("<tier>.<name>")."""
    tier, _, name = check_id.partition(".")
    if tier not in TIERS or not name:
        raise ValueError(f"check id {check_id!r} must be '<tier>.<name>' with tier in {TIERS}")
    if tier in ("gpu", "sm70", "gpu-jit") and "cuda" not in needs:
        needs = (*needs, "cuda")
    if tier == "sm70" and "sm70" not in needs:
        needs = (*needs, "sm70")
    if tier == "gpu-jit" and "jit" not in needs:
        needs = (*needs, "jit")

    def deco(func: Callable[[Ctx], str | None]) -> Callable[[Ctx], str | None]:
        if check_id in REGISTRY:
            raise ValueError(f"check {check_id!r} registered twice")
        doc = (func.__doc__ or "").strip().split("\n\n")[0]
        REGISTRY[check_id] = CheckDef(
            check_id, tier, func, tuple(needs), baseline, " ".join(doc.split())
        )
        return func

    return deco


@dataclass
class Ctx:
    """What a check gets: the expectations the host computed, and the device facts."""

    spec: dict[str, Any]
    device: dict[str, Any] = field(default_factory=dict)

    @property
    def version(self) -> str:
        return str(self.spec["version"])

    @property
    def dist(self) -> str:
        return str(self.spec.get("dist", "1cat-vllm"))


# --------------------------------------------------------------------------- helpers


def _site_dirs() -> list[str]:
    paths = sysconfig.get_paths()
    return sorted({os.path.realpath(paths["purelib"]), os.path.realpath(paths["platlib"])})


def _inside(path: str, roots: list[str]) -> bool:
    real = os.path.realpath(path)
    return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _torch() -> Any:
    try:
        import torch
    except ModuleNotFoundError as exc:
        raise NotRun(missing_module_reason(exc.name or "torch")) from None
    except ImportError as exc:
        raise NotRun(f"torch is not importable in the smoke environment ({exc})") from None
    return torch


# Import name -> distribution name, where they differ (for the install command).
DISTRIBUTIONS = {
    "yaml": "pyyaml",
    "cv2": "opencv-python-headless",
    "PIL": "pillow",
    "zmq": "pyzmq",
    "cpuinfo": "py-cpuinfo",
    "google": "protobuf",
    "sklearn": "scikit-learn",
    "multipart": "python-multipart",
    "jose": "python-jose",
    "dateutil": "python-dateutil",
}


def is_third_party(module: str) -> bool:
    """A module the wheel does not provide itself (its absence is the environment's,
    not the wheel's, fault)."""
    top = module.split(".")[0]
    own = set(_SPEC.get("own_modules") or ("vllm",))
    return bool(top) and top not in own


_MISSING = "needs the module '{}', which is not installed in the smoke environment"
_MISSING_RE = re.compile(re.escape(_MISSING).replace(r"\{\}", "([A-Za-z0-9_]+)"))


def missing_module_reason(module: str) -> str:
    """Why a check cannot run without ``module``. How to install it is said once for
    the whole report, by the host (:func:`missing_modules` finds the module again)."""
    return _MISSING.format(module.split(".")[0])


def missing_modules(detail: str) -> list[str]:
    """The modules a not-run check's detail says it needs (see missing_module_reason)."""
    return list(dict.fromkeys(_MISSING_RE.findall(detail)))


@contextlib.contextmanager
def patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def _import_vllm_module(name: str) -> Any:
    """Import a module of the wheel; a missing *third-party* dependency is NotRun."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and is_third_party(exc.name):
            raise NotRun(f"importing {name}: " + missing_module_reason(exc.name)) from None
        raise


_SPEC: dict[str, Any] = {}


def run_spec() -> dict[str, Any]:
    """The spec of this run (what main() read), which the checks and gates consult."""
    return _SPEC


# --------------------------------------------------------------------------- SM70 ops
#
# The fork's SM70 FP8 ops live in csrc/sm70_turbomind/ops/awq_sm70_gemm.cu (schemas
# in csrc/torch_bindings.cpp, wrappers in vllm/_sm70_ops.py). The CPU stand-ins below
# make every check those ops make, with the ops' own messages, so that what passes on
# the CPU would pass the compiled checks on a V100. A few rules the compiled ops rely
# on without checking are enforced too; their messages say "[stand-in: ...]" and why.

SM70_GROUP = 128
# The SM70 (HMMA 884) GEMM takes the FP8 weight as its B operand, packed in 32-row packs
# along N (SmemCopy_MMA_884_B::M = 32). fp8_sm70_prepare's converter writes ceil(N/32)
# whole packs into the [K, N] buffer it allocates, and the GEMM's B iterator counts
# N/32 whole packs per tile (PackingImpl<HMMA_884, OPERAND_B>): for N % 32 != 0 the
# packer writes past its buffer and the GEMM's output is wrong in hundreds of columns,
# the first among them (the fork's kernels as compute_70 PTX on an H200: 268 of 4,120
# columns, 32 out-of-bounds writes in convert_kernel; not run on a V100). The op
# itself checks only N % 8.
SM70_PACK_N = 32
# Every SM70 E4M3 GEMM kernel the fork registers (gemm/kernel/sm70_884_*.cu) has a
# CTA_K of 16, 32 or 64, and Kernel::is_feasible wants K % CTA_K == 0: with K % 16 != 0
# no kernel qualifies and TurboMind's TM_CHECK aborts the whole process ("No feasible
# kernel found for the problem": seen through the fork's kernels as PTX on an H200).
SM70_MIN_CTA_K = 16

# The stand-in's (k_ld, q_ld): a tag plus K, a tag plus N. Opaque to callers and never
# equal, so that a caller that swaps them, computes its own or hands one layer's meta
# to another fails.
_K_LD_TAG = 0x4B000000
_Q_LD_TAG = 0x51000000
# The stand-in's packed layout: the e4m3 bytes with the sign bit flipped, permuted
# within each 32-column pack along N and each 8-row group along K (no element stays in
# place), so that only the stand-in GEMM reads it right.
_PERM_N = [(5 * i + 3) % SM70_PACK_N for i in range(SM70_PACK_N)]
_PERM_K = [(3 * i + 5) % 8 for i in range(8)]
_SIGN_BIT = 0x80


def _tm_check(cond: bool, message: str) -> None:
    """TORCH_CHECK: the compiled ops raise RuntimeError with their message."""
    if not cond:
        raise RuntimeError(message)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(a: int, b: int) -> int:
    return _cdiv(a, b) * b


def _inverse(perm: list[int]) -> list[int]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


def _permute_packs(t: Any, perm_n: list[int], perm_k: list[int] | None) -> Any:
    """Permute the columns of a 2D tensor within 32-column packs (and its rows
    within 8-row groups); a new contiguous tensor."""
    import torch

    rows, cols = t.shape
    t = t.reshape(rows, cols // SM70_PACK_N, SM70_PACK_N).index_select(2, torch.tensor(perm_n))
    t = t.reshape(rows, cols)
    if perm_k is not None:
        t = t.reshape(rows // 8, 8, cols).index_select(1, torch.tensor(perm_k)).reshape(rows, cols)
    return t.contiguous()


def _on_standin_device(t: Any) -> bool:
    # The compiled ops want CUDA tensors; the stand-ins' device is the CPU.
    return bool(t.device.type == "cpu")


def _prepare_checks(
    qweight: Any, scales: Any, group_size: int, on_device: Callable[[Any], bool]
) -> tuple[int, int]:
    """fp8_sm70_prepare's checks, in its order and with its messages; (N, K)."""
    import torch

    op = "fp8_sm70_prepare"
    _tm_check(on_device(qweight), f"{op}: qweight must be CUDA.")
    _tm_check(on_device(scales), f"{op}: scales must be CUDA.")
    _tm_check(qweight.dtype == torch.float8_e4m3fn, f"{op}: qweight must be float8_e4m3fn.")
    _tm_check(scales.dtype == torch.float32, f"{op}: scales must be float32.")
    _tm_check(qweight.dim() == 2, f"{op}: qweight must be 2D.")
    _tm_check(scales.dim() == 2, f"{op}: scales must be 2D.")
    _tm_check(group_size == SM70_GROUP, f"{op}: only group_size=128 is supported.")
    n, k = (int(d) for d in qweight.shape)
    _tm_check(k % 8 == 0 and n % 8 == 0, f"{op}: K and N must be multiples of 8.")
    _tm_check(scales.size(0) == _cdiv(n, group_size), f"{op}: output scale block mismatch.")
    _tm_check(scales.size(1) == _cdiv(k, group_size), f"{op}: input scale block mismatch.")
    return n, k


def _gemm_type_checks(
    out: Any, x: Any, weight: Any, scales: Any, on_device: Callable[[Any], bool]
) -> None:
    """fp8_gemm_sm70_out's device and dtype checks, with its messages."""
    import torch

    op = "fp8_gemm_sm70"
    for what, t in (("input", x), ("weight", weight), ("scales", scales), ("output", out)):
        _tm_check(on_device(t), f"{op}: {what} must be CUDA.")
    _tm_check(x.dtype == torch.float16, f"{op}: input must be float16.")
    _tm_check(weight.dtype == torch.uint8, f"{op}: weight must be uint8.")
    _tm_check(scales.dtype == torch.float16, f"{op}: scales must be float16.")
    _tm_check(out.dtype == torch.float16, f"{op}: output must be float16.")


def _fp8_sm70_prepare_ref(
    qweight: Any, scales: Any, group_size: int, interleave_gated_silu: bool
) -> list[Any]:
    """CPU stand-in for _C::fp8_sm70_prepare, with its checks: an e4m3 weight
    [N, K] and fp32 block scales [ceil(N/128), ceil(K/128)] -> a packed uint8 weight
    [K, N], fp16 group scales [ceil(K/128), N] (both in the stand-in's own layout)
    and meta, int64[2] on the CPU: (k_ld, q_ld)."""
    import torch

    op = "fp8_sm70_prepare"
    n, k = _prepare_checks(qweight, scales, group_size, _on_standin_device)
    if interleave_gated_silu:
        raise NotImplementedError(f"{op}: the stand-in covers the plain layout only")
    _tm_check(
        n % SM70_PACK_N == 0,
        f"{op}: N={n} is not a multiple of {SM70_PACK_N} [stand-in: the compiled op checks "
        f"N % 8 only, but packs N in {SM70_PACK_N}-row packs: it would write past its [K, N] "
        f"buffer, and its GEMM output would be wrong in hundreds of columns]",
    )
    flipped = qweight.contiguous().view(torch.uint8).t() ^ _SIGN_BIT  # [K, N]
    tm_weight = _permute_packs(flipped, _PERM_N, _PERM_K)
    group_scales = scales.t().to(torch.float16).repeat_interleave(group_size, 1)[:, :n]
    tm_scales = _permute_packs(group_scales, _PERM_N, None)
    meta = torch.tensor([_K_LD_TAG + k, _Q_LD_TAG + n], dtype=torch.int64)
    return [tm_weight, tm_scales, meta]


def _fp8_gemm_sm70_out_ref(
    out: Any,
    x: Any,
    weight: Any,
    scales: Any,
    group_size: int,
    k_ld: int,
    q_ld: int,
    gated_silu: bool,
) -> None:
    """CPU stand-in for _C::fp8_gemm_sm70_out, with its checks: out = x @ W, W
    dequantized as the kernel does (e4m3 -> fp16, times the fp16 group scale, the
    product rounded to fp16 as __hmul rounds it), accumulated in float64."""
    import torch

    op = "fp8_gemm_sm70"
    _gemm_type_checks(out, x, weight, scales, _on_standin_device)
    _tm_check(group_size == SM70_GROUP, f"{op}: only group_size=128 is supported.")
    _tm_check(
        all(t.dim() == 2 for t in (x, weight, scales, out)),
        f"{op}: input, weight, scales and output must be 2D [stand-in: the op reads "
        f"sizes 0 and 1 of each]",
    )
    m, k = x.shape
    n = weight.size(1)
    _tm_check(weight.size(0) == k, f"{op}: weight shape mismatch.")
    _tm_check(scales.size(0) == _cdiv(k, group_size), f"{op}: scale groups mismatch.")
    _tm_check(scales.size(1) == n, f"{op}: scale shape mismatch.")
    _tm_check(out.size(0) == m, f"{op}: output rows must match input rows.")
    _tm_check(out.stride(1) == 1, f"{op}: output must be row-major contiguous.")
    if gated_silu:
        _tm_check(n % 2 == 0, f"{op}: gated_silu requires even output dim.")
        _tm_check(out.size(1) == n // 2, f"{op}: gated_silu output cols must be n/2.")
        raise NotImplementedError(f"{op}: the stand-in covers gated_silu=False only")
    _tm_check(out.size(1) == n, f"{op}: output cols must match weight output dim.")
    _tm_check(
        x.stride(1) == 1,
        f"{op}: input has column stride {x.stride(1)} [stand-in: the kernel reads input "
        f"rows at stride(0) and assumes unit column stride]",
    )
    _tm_check(
        weight.is_contiguous() and scales.is_contiguous(),
        f"{op}: weight or scales not contiguous [stand-in: the kernel reads them as "
        f"fp8_sm70_prepare laid them out]",
    )
    _tm_check(
        k % SM70_MIN_CTA_K == 0,
        f"{op}: No feasible kernel found for the problem [stand-in: K={k} is not a "
        f"multiple of {SM70_MIN_CTA_K}, so no SM70 E4M3 kernel is feasible, and the compiled "
        f"op aborts the whole process here (TurboMind's TM_CHECK)]",
    )
    want = (_K_LD_TAG + k, _Q_LD_TAG + n)
    _tm_check(
        (k_ld, q_ld) == want,
        f"{op}: (k_ld, q_ld) = ({k_ld:#x}, {q_ld:#x}) is not the meta fp8_sm70_prepare "
        f"returned for a [K={k}, N={n}] weight ({want[0]:#x}, {want[1]:#x}) [stand-in: the "
        f"kernel reads the packed operands at these leading dimensions unchecked]",
    )
    raw = _permute_packs(weight, _inverse(_PERM_N), _inverse(_PERM_K)) ^ _SIGN_BIT
    w16 = raw.view(torch.float8_e4m3fn).to(torch.float16)
    s16 = _permute_packs(scales, _inverse(_PERM_N), None).repeat_interleave(group_size, 0)[:k]
    # An fp16 x fp16 product is exact in fp32: one rounding to fp16, as __hmul does.
    dequant = (w16.float() * s16.float()).to(torch.float16)
    out.copy_((x.double() @ dequant.double()).to(out.dtype))


def _fp8_gemm_sm70_out_meta_ref(
    out: Any, x: Any, weight: Any, scales: Any, meta: Any, gated_silu: bool
) -> None:
    """CPU stand-in for _C::fp8_gemm_sm70_out_meta: (k_ld, q_ld) read from meta."""
    import torch

    _tm_check(meta.dtype == torch.int64, "fp8_gemm_sm70: meta must be int64.")
    _tm_check(meta.numel() >= 2, "fp8_gemm_sm70: meta must have two values.")
    lds = meta.to("cpu").contiguous()
    _fp8_gemm_sm70_out_ref(out, x, weight, scales, SM70_GROUP, int(lds[0]), int(lds[1]), gated_silu)


def _fp8_gemm_sm70_out_auto_ref(out: Any, x: Any, weight: Any, scales: Any) -> None:
    """CPU stand-in for _C::fp8_gemm_sm70_out_auto: (k_ld, q_ld) derived from the
    shapes, as fp8_sm70_prepare derives them."""
    k_ld = _K_LD_TAG + x.size(-1)
    q_ld = _Q_LD_TAG + weight.size(-1)
    _fp8_gemm_sm70_out_ref(out, x, weight, scales, SM70_GROUP, k_ld, q_ld, False)


def _awq_gemm_sm70_out_gate(*args: Any) -> None:
    raise RuntimeError(
        "awq_gemm_sm70_out: not covered by the stand-in ops; it is registered because the "
        "fork's SM70 warmup runs only when it exists, and no AWQ layer takes part here"
    )


# The ops the series and the fork's SM70 warmup use: name, schema (as the fork's
# csrc/torch_bindings.cpp defines it), CPU stand-in.
_SM70_OPS: tuple[tuple[str, str, Callable[..., Any]], ...] = (
    (
        "fp8_sm70_prepare",
        (
            "fp8_sm70_prepare(Tensor _kernel, Tensor _scaling_factors, int group_size, "
            "bool interleave_gated_silu) -> Tensor[]"
        ),
        _fp8_sm70_prepare_ref,
    ),
    (
        "fp8_gemm_sm70_out",
        (
            "fp8_gemm_sm70_out(Tensor(a!) out, Tensor _in_feats, Tensor _kernel, "
            "Tensor _scaling_factors, int group_size, int k_ld, int q_ld, bool gated_silu) -> ()"
        ),
        _fp8_gemm_sm70_out_ref,
    ),
    (
        "fp8_gemm_sm70_out_meta",
        (
            "fp8_gemm_sm70_out_meta(Tensor(a!) out, Tensor _in_feats, Tensor _kernel, "
            "Tensor _scaling_factors, Tensor _meta, bool gated_silu) -> ()"
        ),
        _fp8_gemm_sm70_out_meta_ref,
    ),
    (
        "fp8_gemm_sm70_out_auto",
        (
            "fp8_gemm_sm70_out_auto(Tensor(a!) out, Tensor _in_feats, Tensor _kernel, "
            "Tensor _scaling_factors) -> ()"
        ),
        _fp8_gemm_sm70_out_auto_ref,
    ),
    (
        "awq_gemm_sm70_out",
        (
            "awq_gemm_sm70_out(Tensor(a!) out, Tensor _in_feats, Tensor _kernel, "
            "Tensor _scaling_factors, int group_size, int k_ld, int q_ld, bool gated_silu) -> ()"
        ),
        _awq_gemm_sm70_out_gate,
    ),
)
# What the fork's SM70 warmup (model_executor/warmup/awq_sm70_warmup.py) checks for
# before it warms FP8 dense layers: without them it skips them.
SM70_WARMUP_GATES = ("awq_gemm_sm70_out", "fp8_gemm_sm70_out_meta")


class ReferenceSm70Ops:
    """CPU stand-ins for the SM70 ops under torch.ops._C, as strict as the kernels."""

    name = "reference"
    device = "cpu"
    exact = True  # float64 accumulation: results must match bit for bit
    can_toggle = True  # install/uninstall to test the "op absent" branch

    def __init__(self) -> None:
        self._libs: list[Any] = []

    def install(self) -> None:
        if self._libs:
            return
        import torch

        define = torch.library.Library("_C", "FRAGMENT")
        add_cpu = torch.library.Library("_C", "IMPL")
        for op, schema, impl in _SM70_OPS:
            if hasattr(torch.ops._C, op):
                # The wheel's compiled library is loaded and defines the op (for
                # CUDA): add a CPU kernel to it instead of defining it again.
                add_cpu.impl(op, impl, "CPU")
                self.can_toggle = False
            else:
                define.define(schema)
                define.impl(op, impl, "CompositeExplicitAutograd")
        self._libs = [define, add_cpu]

    def uninstall(self) -> None:
        if self._libs and self.can_toggle:
            for lib in self._libs:
                lib._destroy()
            self._libs = []


class RealSm70Ops:
    """The wheel's compiled SM70 ops on a real 7.0 GPU."""

    name = "real"
    device = "cuda"
    exact = False
    can_toggle = False

    def install(self) -> None:
        import torch

        _import_vllm_module("vllm._sm70_ops")  # loads vllm._C
        for op in ("fp8_sm70_prepare", "fp8_gemm_sm70_out"):
            assert hasattr(torch.ops._C, op), f"this build has no _C::{op}"

    def uninstall(self) -> None:
        pass


# The C interface of the PTX library (forkpatch/smoke/sm70ptx/fp8_capi.cu).
PTX_SYMBOLS = ("fpsm70_prepare", "fpsm70_gemm", "fpsm70_capability", "fpsm70_last_error")
PTX_MANIFEST = "manifest.json"


class PtxLibraryError(RuntimeError):
    """The PTX library given to the gpu-jit tier cannot be used (the message says why)."""


def load_ptx_library(path: str) -> tuple[Any, dict[str, Any]]:
    """The PTX library at ``path`` (ctypes, argument types set) and its build manifest."""
    import ctypes

    rebuild = "build it with ci/sm70-ptx-lib.sh (python -m forkpatch.smoke.ptxbuild)"
    if not os.path.isfile(path):
        raise PtxLibraryError(f"PTX library {path}: no such file; {rebuild}")
    manifest_path = os.path.join(os.path.dirname(path), PTX_MANIFEST)
    try:
        with open(manifest_path, encoding="utf-8") as fh:
            manifest = json.load(fh)
    except OSError:
        raise PtxLibraryError(
            f"PTX library {path}: no {PTX_MANIFEST} beside it (fork commit, compiler, "
            f"flags): not a forkpatch build; {rebuild}"
        ) from None
    except ValueError as exc:
        raise PtxLibraryError(f"PTX library {path}: {manifest_path} is not JSON ({exc})") from None
    if not isinstance(manifest, dict) or "fork_commit" not in manifest:
        raise PtxLibraryError(f"PTX library {path}: {manifest_path} has no fork_commit")
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        raise PtxLibraryError(f"PTX library {path} does not load: {exc}; {rebuild}") from None
    missing = [name for name in PTX_SYMBOLS if not hasattr(lib, name)]
    if missing:
        raise PtxLibraryError(
            f"PTX library {path} is not forkpatch's SM70 FP8 library: it has no "
            f"{', '.join(missing)}; {rebuild}"
        )
    i64, ptr, c_int = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
    lib.fpsm70_last_error.restype = ctypes.c_char_p
    lib.fpsm70_last_error.argtypes = []
    lib.fpsm70_capability.argtypes = [c_int, ctypes.POINTER(c_int), ctypes.POINTER(c_int)]
    lib.fpsm70_prepare.argtypes = [ptr, ptr, i64, i64, i64, ptr, ptr, ctypes.POINTER(i64)]
    lib.fpsm70_prepare.argtypes += [c_int, ptr]
    lib.fpsm70_gemm.argtypes = [ptr, i64, i64, i64, i64, ptr, i64, i64, i64, ptr, i64, i64]
    lib.fpsm70_gemm.argtypes += [ptr, i64, i64, i64, i64, i64, c_int, c_int, ptr]
    for fn in (lib.fpsm70_capability, lib.fpsm70_prepare, lib.fpsm70_gemm):
        fn.restype = c_int
    return lib, manifest


class PtxSm70Ops:
    """The fork's own SM70 FP8 kernels, built as compute_70 PTX (forkpatch.smoke.ptxbuild)
    and JIT-compiled by the driver for the GPU at hand (capability 7.0 or newer), in
    place of the fork's _C ops: registered under the fork's schemas through
    torch.library. vLLM is shown a (7, 0) device, as TurboMind is (the library's
    link-time wrap of cudaGetDeviceProperties_v2). Never an SM70 result."""

    name = "ptx"
    device = "cuda"
    exact = False
    can_toggle = False

    def __init__(self, path: str) -> None:
        self.path = path
        self.lib: Any = None
        self.manifest: dict[str, Any] = {}
        self._libs: list[Any] = []

    def install(self) -> None:
        if self.lib is not None:
            return
        import torch

        if _REFERENCE is not None:  # the static tier's CPU stand-ins, same process
            _REFERENCE.uninstall()
        present = [op for op, _, _ in _SM70_OPS if hasattr(torch.ops._C, op)]
        if present:
            raise NotRun(
                f"this build's own _C defines {', '.join(present)}: the gpu-jit tier stands "
                "in for a build without the SM70 ops (on a V100 run the sm70 tier)"
            )
        lib, manifest = load_ptx_library(self.path)
        impls: dict[str, Callable[..., Any]] = {
            "fp8_sm70_prepare": self._prepare,
            "fp8_gemm_sm70_out": self._gemm,
            "fp8_gemm_sm70_out_meta": self._gemm_meta,
            "fp8_gemm_sm70_out_auto": self._gemm_auto,
            "awq_gemm_sm70_out": _awq_gemm_sm70_out_gate,
        }
        define = torch.library.Library("_C", "FRAGMENT")
        for op, schema, _ in _SM70_OPS:
            define.define(schema)
            define.impl(op, impls[op], "CUDA")
        self.lib, self.manifest, self._libs = lib, manifest, [define]

    def uninstall(self) -> None:
        pass

    def _call(self, rc: int) -> None:
        if rc != 0:
            raise RuntimeError(self.lib.fpsm70_last_error().decode("utf-8", "replace"))

    @staticmethod
    def _stream(t: Any) -> Any:
        import torch

        return torch.cuda.current_stream(t.device).cuda_stream

    def _prepare(self, qweight: Any, scales: Any, group_size: int, interleave: bool) -> list[Any]:
        """fp8_sm70_prepare: the torch work of the fork's glue here, TurboMind's there."""
        import ctypes

        import torch

        n, k = _prepare_checks(qweight, scales, group_size, lambda t: bool(t.is_cuda))
        if interleave:
            raise NotImplementedError(
                "fp8_sm70_prepare: the PTX library covers the plain layout only"
            )
        with torch.cuda.device(qweight.device):
            q_kn = qweight.contiguous().view(torch.uint8).t().contiguous()
            group_scales = scales.t().contiguous().to(torch.float16)
            group_scales = group_scales.repeat_interleave(group_size, 1)[:, :n].contiguous()
            tm_weight = torch.empty((k, n), dtype=torch.uint8, device=qweight.device)
            tm_scales = torch.empty_like(group_scales)
            lds = (ctypes.c_int64 * 2)()
            self._call(
                self.lib.fpsm70_prepare(
                    q_kn.data_ptr(), group_scales.data_ptr(), n, k, group_size,
                    tm_weight.data_ptr(), tm_scales.data_ptr(), lds,
                    qweight.device.index or 0, self._stream(qweight),
                )
            )  # fmt: skip
        return [tm_weight, tm_scales, torch.tensor([lds[0], lds[1]], dtype=torch.int64)]

    def _gemm(
        self, out: Any, x: Any, weight: Any, scales: Any, group_size: int,
        k_ld: int, q_ld: int, gated_silu: bool,
    ) -> None:  # fmt: skip
        import torch

        _gemm_type_checks(out, x, weight, scales, lambda t: bool(t.is_cuda))
        with torch.cuda.device(x.device):
            self._call(
                self.lib.fpsm70_gemm(
                    out.data_ptr(), out.size(0), out.size(1), out.stride(0), out.stride(1),
                    x.data_ptr(), x.size(0), x.size(1), x.stride(0),
                    weight.data_ptr(), weight.size(0), weight.size(1),
                    scales.data_ptr(), scales.size(0), scales.size(1), group_size,
                    k_ld, q_ld, int(gated_silu), x.device.index or 0, self._stream(x),
                )
            )  # fmt: skip

    def _gemm_meta(
        self, out: Any, x: Any, weight: Any, scales: Any, meta: Any, gated_silu: bool
    ) -> None:
        lds = meta.to("cpu").contiguous()
        self._gemm(out, x, weight, scales, SM70_GROUP, int(lds[0]), int(lds[1]), gated_silu)

    def _gemm_auto(self, out: Any, x: Any, weight: Any, scales: Any) -> None:
        raise NotImplementedError("fp8_gemm_sm70_out_auto: not covered by the PTX library")


Ops = Any  # ReferenceSm70Ops | RealSm70Ops | PtxSm70Ops (kept loose: this file runs on 3.8+)

_REFERENCE: ReferenceSm70Ops | None = None


def _reference_ops() -> ReferenceSm70Ops:
    global _REFERENCE
    if _REFERENCE is None:
        _REFERENCE = ReferenceSm70Ops()
    return _REFERENCE


@contextlib.contextmanager
def device_capability(ops: Ops, cap: tuple[int, int] | None) -> Iterator[None]:
    """Pretend to be a CUDA device of capability ``cap`` (reference ops only);
    with real ops the device's own capability is used and must match."""
    from vllm.platforms import current_platform

    if isinstance(ops, RealSm70Ops):
        real = tuple(current_platform.get_device_capability())
        assert cap is None or real == cap, f"device is {real}, check wants {cap}"
        yield
        return
    assert cap is not None
    from vllm.platforms.interface import DeviceCapability

    cls = type(current_platform)
    fake = DeviceCapability(*cap)
    with (
        patched(cls, "is_cuda", lambda self: True),
        patched(cls, "get_device_capability", classmethod(lambda c, device_id=0: fake)),
    ):
        yield


@contextlib.contextmanager
def patched_environ(**values: str | None) -> Iterator[None]:
    """Set (None: unset) environment variables for the block; vllm.envs reads them."""
    old = {k: os.environ.get(k) for k in values}

    def put(items: dict[str, str | None]) -> None:
        for k, v in items.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    put(values)
    try:
        yield
    finally:
        put(old)


# The fork's switches for its SM70 quantized paths (vllm/envs.py), at their defaults.
_SM70_SWITCHES_DEFAULT: dict[str, str | None] = {
    "VLLM_SM70_QUANT_BACKEND": None,
    "VLLM_SM70_FP8_TURBOMIND": None,
}


@contextlib.contextmanager
def sm70_worker_device(ops: Ops) -> Iterator[Any]:
    """The device the fork's SM70 warmup is handed (``worker.device``): the real
    one with real ops; with the PTX ops the real one, read as (7, 0); with the
    stand-ins a ``cuda:0`` that reads (7, 0) and whose synchronisation is a no-op
    (the stand-ins compute on the CPU, synchronously)."""
    import torch

    if isinstance(ops, RealSm70Ops):
        yield torch.device("cuda", torch.cuda.current_device())
        return
    no_sync = lambda device=None: None  # noqa: E731
    with contextlib.ExitStack() as stack:
        stack.enter_context(patched(torch.cuda, "get_device_capability", lambda device=None: SM70))
        if isinstance(ops, PtxSm70Ops):  # a real device that reads (7, 0)
            yield torch.device("cuda", torch.cuda.current_device())
            return
        stack.enter_context(patched(torch.cuda, "synchronize", no_sync))
        accelerator = getattr(torch, "accelerator", None)  # v1.3.0's warmup syncs through it
        if accelerator is not None and hasattr(accelerator, "synchronize"):
            stack.enter_context(patched(accelerator, "synchronize", no_sync))
        yield torch.device("cuda", 0)


def _online_fp8() -> Any:
    return _import_vllm_module("vllm.model_executor.layers.quantization.online.fp8")


def _online_config(scheme: str) -> Any:
    """The OnlineQuantizationConfig that `--quantization SCHEME` gives (as
    VllmConfig builds it through get_quant_config)."""
    qconf = _import_vllm_module("vllm.config.quantization")
    base = _import_vllm_module("vllm.model_executor.layers.quantization.online.base")
    return base.OnlineQuantizationConfig(args=qconf.resolve_quantization_config(scheme, None))


# Rows this small have block scales in fp16's subnormal range, where the kernel's
# fp16 dequantization (one rounding per product) visibly differs from an exact one.
SMALL_AMPLITUDE = 3e-5


def _dequant_reference(q: Any, s: Any, x: Any) -> Any:
    """x @ dequant(q, s).T for an e4m3 weight [n, k] and its fp32 block scales,
    dequantized as the kernel does (fp16 scales, each product rounded to fp16),
    in float64; on the CPU."""
    import torch

    n, k = q.shape
    s_full = s.to(torch.float16).repeat_interleave(BLOCK, 0)[:n]
    s_full = s_full.repeat_interleave(BLOCK, 1)[:, :k]
    w = (q.to(torch.float16).float() * s_full.float()).to(torch.float16)
    return (x.double() @ w.t().contiguous().double()).to(x.dtype)


# How far the layer's own (device-side) block cast may be from the CPU's: CUDA divides
# by a scalar through its reciprocal, so a few e4m3 codes round the other way (by one
# step) and a scale can differ in its last bits. More than that is a wrong cast.
CAST_MAX_STEP = 1
CAST_MAX_DIFFERING = 0.02  # of the codes
CAST_SCALE_RTOL = 1e-6


def _check_cast(w: Any, cast: tuple[Any, Any]) -> int:
    """The e4m3 weight and scales the layer handed to fp8_sm70_prepare against the
    CPU's block cast of its fp16 weight ``w`` [n, k]: rows past n (the padding) +0.0,
    scales equal to CAST_SCALE_RTOL, codes at most CAST_MAX_STEP apart with the same
    sign, at most CAST_MAX_DIFFERING of them different. Returns how many differ."""
    import torch
    from vllm.utils.deep_gemm import _per_block_cast_to_fp8_eager

    n, k = w.shape
    q, s = cast
    padded = _round_up(n, BLOCK)
    assert q.dtype == torch.float8_e4m3fn and tuple(q.shape) == (padded, k), (
        f"the layer packed an {q.dtype} weight {tuple(q.shape)}, want e4m3 {(padded, k)}"
    )
    assert not q[n:].view(torch.uint8).any(), (
        f"rows {n}..{padded} of the packed weight are not +0.0"
    )
    q_ref, s_ref = _per_block_cast_to_fp8_eager(w.cpu(), [BLOCK, BLOCK], False)
    assert tuple(s.shape) == tuple(s_ref.shape), (
        f"the layer's block scales are {tuple(s.shape)}, want {tuple(s_ref.shape)}"
    )
    scale_err = float(((s.double() - s_ref.double()).abs() / s_ref.double().abs()).max())
    assert scale_err <= CAST_SCALE_RTOL, (
        f"N={n} K={k}: the layer's block scales differ from the CPU cast's by {scale_err:.3g} "
        f"(relative; at most {CAST_SCALE_RTOL:g} allowed)"
    )
    got = q[:n].view(torch.uint8).to(torch.int16)
    want = q_ref.view(torch.uint8).to(torch.int16)
    step = ((got & 0x7F) - (want & 0x7F)).abs()
    sign = ((got ^ want) & 0x80).bool() & (((got & 0x7F) + (want & 0x7F)) > 0)
    differing = int((got != want).sum())
    limit = int(CAST_MAX_DIFFERING * got.numel())
    assert int(step.max()) <= CAST_MAX_STEP and not bool(sign.any()) and differing <= limit, (
        f"N={n} K={k}: the layer's e4m3 weight is not the block cast of its fp16 weight: "
        f"{differing} of {got.numel()} codes differ (at most {limit}), by up to "
        f"{int(step.max())} steps (at most {CAST_MAX_STEP}), {int(sign.sum())} in sign"
    )
    return differing


def _make_layer(method: Any, n: int, k: int, device: str, bias: bool) -> Any:
    """An online fp8_per_block layer [n, k] made by ``method`` and loaded with
    random fp16 weights; its first 128 rows are of SMALL_AMPLITUDE."""
    import torch
    from vllm.model_executor import parameter

    layer: Any = torch.nn.Module()
    layer.prefix = f"model.layers.0.proj_{n}x{k}"
    with (
        patched(parameter, "get_tensor_model_parallel_rank", lambda: 0),
        patched(parameter, "get_tensor_model_parallel_world_size", lambda: 1),
    ):
        method.create_weights(
            layer,
            input_size_per_partition=k,
            output_partition_sizes=[n],
            input_size=k,
            output_size=n,
            params_dtype=torch.float16,
            weight_loader=lambda *a, **kw: None,
        )
    gen = torch.Generator().manual_seed(n * 31 + k)
    w = torch.randn(n, k, generator=gen) * 0.05
    w[:BLOCK] *= SMALL_AMPLITUDE / 0.05
    w = w.to(torch.float16).to(device)
    layer.register_parameter("weight", torch.nn.Parameter(w, requires_grad=False))
    layer.bias = None
    if bias:
        b = (torch.randn(n, generator=gen) * 0.1).to(torch.float16).to(device)
        layer.bias = torch.nn.Parameter(b, requires_grad=False)
    return layer


# The check bodies, on the ops given (reference stand-ins or the real ones). Public:
# the registered checks below call them, and so does the real-fork tier on a patched
# source checkout (tests/support/patched_checks.py).


def capability_floor_check(ops: Ops) -> str:
    """What VllmConfig's capability check admits: 7.0 for fp8_per_block with the
    SM70 ops and the fork's switches on, 7.5 for every other online scheme and
    for the class-level (scheme-less) question; MoE layers refused by name."""
    base = _import_vllm_module("vllm.model_executor.layers.quantization.online.base")
    cls = base.OnlineQuantizationConfig
    schemes = ("fp8_per_block", "fp8_per_tensor", "mxfp8", "int8_per_channel_weight_only")
    want = {s: 70 if s == "fp8_per_block" else 75 for s in schemes}
    ops.install()
    with device_capability(ops, SM70), patched_environ(**_SM70_SWITCHES_DEFAULT):
        got = {s: _online_config(s).get_min_capability() for s in schemes}
        assert got == want, f"floors on (7, 0) with the SM70 ops: {got}, want {want}"
        assert cls.get_min_capability() == 75, (
            f"OnlineQuantizationConfig.get_min_capability() (no scheme) is "
            f"{cls.get_min_capability()}, want 75"
        )
        # The fork's own switches (VLLM_SM70_QUANT_BACKEND, VLLM_SM70_FP8_TURBOMIND),
        # honoured as Fp8Config honours them.
        for env, floor in (
            ({"VLLM_SM70_FP8_TURBOMIND": "0"}, 75),
            ({"VLLM_SM70_QUANT_BACKEND": "marlin"}, 75),
            ({"VLLM_SM70_QUANT_BACKEND": "turbomind", "VLLM_SM70_FP8_TURBOMIND": "0"}, 70),
        ):
            with patched_environ(**env):
                got_env = _online_config("fp8_per_block").get_min_capability()
            assert got_env == floor, f"fp8_per_block floor with {env} is {got_env}, want {floor}"
        detail = _moe_refused(base)
    if not ops.can_toggle:
        return f"floor 70 for fp8_per_block on (7, 0), 75 for the other schemes; {detail}"
    for cap in [(7, 5), (8, 0), (8, 9), (9, 0), (12, 0)]:
        with device_capability(ops, cap):
            got = {s: _online_config(s).get_min_capability() for s in schemes}
        assert set(got.values()) == {75}, f"floors on {cap}: {got}, want 75"
    ops.uninstall()
    try:
        with device_capability(ops, SM70):
            got = _online_config("fp8_per_block").get_min_capability()
        assert got == 75, f"fp8_per_block floor on (7, 0) without the SM70 ops is {got}"
    finally:
        ops.install()
    return (
        "floor 70 only for fp8_per_block on (7, 0) with the ops and switches on; 75 for "
        f"the other schemes, without the ops and on 7.5+; {detail}"
    )


def _moe_refused(base: Any) -> str:
    """On SM70 an online-quantized MoE layer has no kernel: refused by name."""
    import torch

    moe_cls = _import_vllm_module("vllm.model_executor.layers.fused_moe").RoutedExperts
    layer = moe_cls.__new__(moe_cls)
    torch.nn.Module.__init__(layer)
    prefix = "model.layers.3.mlp.experts"
    try:
        _online_config("fp8_per_block").get_quant_method(layer, prefix=prefix)
    except ValueError as exc:
        assert prefix in str(exc), f"the MoE refusal does not name the layer: {exc}"
        assert '{"linear": "fp8_per_block"}' in str(exc), f"no way out in: {exc}"
    else:
        raise AssertionError(f"fp8_per_block on SM70 accepted the MoE layer {prefix}")
    # The way out it names: linear layers only, which 7.0 admits.
    qconf = _import_vllm_module("vllm.config.quantization")
    args = qconf.resolve_quantization_config("online", {"linear": "fp8_per_block"})
    floor = base.OnlineQuantizationConfig(args=args).get_min_capability()
    assert args.moe is None and floor == 70, f"linear-only config: moe={args.moe}, floor {floor}"
    return "MoE layers refused by name, pointing at the linear-only config 7.0 admits"


def padding_helpers_check(ops: Ops) -> str:
    import torch

    f = _online_fp8()
    q = (torch.randn(ODD_WIDTH, 256) * 10).to(torch.float8_e4m3fn).to(ops.device)
    p = f.pad_fp8_rows_to_block(q, BLOCK)
    assert p.dtype == q.dtype and tuple(p.shape) == (4224, 256), tuple(p.shape)
    assert torch.equal(p[:ODD_WIDTH].view(torch.uint8), q.view(torch.uint8))
    assert not p[ODD_WIDTH:].view(torch.uint8).any(), "padding rows are not +0.0"
    q128 = q[:4096]
    assert f.pad_fp8_rows_to_block(q128, BLOCK) is q128, "a 128-multiple was copied"
    out = torch.randn(3, 2, 4224, device=ops.device)
    s = f.slice_to_true_width(out, ODD_WIDTH)
    assert tuple(s.shape) == (3, 2, ODD_WIDTH) and s.is_contiguous()
    assert torch.equal(s, out[..., :ODD_WIDTH])
    assert f.slice_to_true_width(s, ODD_WIDTH) is s
    return f"{ODD_WIDTH} rows padded to 4224 with zeros and sliced back"


def eager_block_cast_check(ops: Ops) -> str:
    import torch

    dg = _import_vllm_module("vllm.utils.deep_gemm")
    compiled_calls: list[int] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        compiled_calls.append(1)
        if not isinstance(ops, ReferenceSm70Ops):
            raise AssertionError("compiled block cast called on SM70")
        return dg._per_block_cast_to_fp8_eager(*args, **kwargs)

    assert dg._per_block_cast_to_fp8_eager is not dg._per_block_cast_to_fp8_compiled
    x = torch.randn(300, 200, dtype=torch.float16, device=ops.device)
    with patched(dg, "_per_block_cast_to_fp8_compiled", spy):
        with device_capability(ops, SM70):
            q, s = dg.per_block_cast_to_fp8(x, [BLOCK, BLOCK], use_ue8m0=False)
        assert compiled_calls == [], "SM70 went through the compiled (Triton) wrapper"
        assert tuple(q.shape) == (300, 200) and q.dtype == torch.float8_e4m3fn
        assert tuple(s.shape) == (3, 2) and s.dtype == torch.float32
        q_ref, s_ref = dg._per_block_cast_to_fp8_eager(x, [BLOCK, BLOCK], False)
        assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8))
        assert torch.equal(s, s_ref)
        if ops.can_toggle:
            with device_capability(ops, (9, 0)):
                dg.per_block_cast_to_fp8(x, [BLOCK, BLOCK], use_ue8m0=False)
            assert compiled_calls == [1], "non-SM70 devices no longer use the compiled cast"
    return "SM70 uses the eager cast, other devices the compiled one"


@contextlib.contextmanager
def _sm70_online_fp8(ops: Ops) -> Iterator[Any]:
    """online/fp8.py as it runs on a 7.0 device with the SM70 ops (capability
    mocked for the stand-ins), an fp16 model, the fork's switches at their
    defaults, and no generic FP8 kernel allowed (SM70 must not set one up)."""
    from types import SimpleNamespace

    import torch

    f = _online_fp8()
    ops.install()

    def no_generic_kernel(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("generic FP8 kernel initialised on SM70")

    def fake_config() -> Any:
        return SimpleNamespace(model_config=SimpleNamespace(dtype=torch.float16))

    with (
        device_capability(ops, SM70),
        patched_environ(**_SM70_SWITCHES_DEFAULT),
        patched(f, "get_current_vllm_config", fake_config),
        patched(f, "init_fp8_linear_kernel", no_generic_kernel),
    ):
        yield f


def _packed_layer(
    f: Any, ops: Ops, n: int, k: int, bias: bool
) -> tuple[Any, Any, Any, Any, tuple[Any, Any]]:
    """A patched online fp8_per_block layer [n, k], loaded and processed (packed
    for the SM70 GEMM): (method, layer, its fp16 weight, its bias or None, the
    e4m3 weight and fp32 scales it handed to fp8_sm70_prepare, on the CPU)."""
    import torch

    sm70_ops = _import_vllm_module("vllm._sm70_ops")
    method = f.Fp8PerBlockOnlineLinearMethod()
    assert method.use_sm70_fp8, "SM70 path not selected"
    layer = _make_layer(method, n, k, ops.device, bias)
    assert not hasattr(method, "fp8_linear"), "a generic FP8 kernel was set up on SM70"
    w = layer.weight.data.clone()
    b = None if layer.bias is None else layer.bias.data.clone()
    casts: list[tuple[Any, Any]] = []
    real_prepare = sm70_ops.fp8_sm70_prepare

    def prepare_spy(qweight: Any, scales: Any, *args: Any) -> Any:
        casts.append((qweight.detach().cpu().clone(), scales.detach().cpu().clone()))
        return real_prepare(qweight, scales, *args)

    with patched(sm70_ops, "fp8_sm70_prepare", prepare_spy):
        method.process_weights_after_loading(layer)
    assert len(casts) == 1, f"fp8_sm70_prepare called {len(casts)} times for one layer"
    padded = _round_up(n, BLOCK)
    assert layer.sm70_fp8_turbomind and layer.fp8_true_n == n, (
        f"sm70_fp8_turbomind={getattr(layer, 'sm70_fp8_turbomind', None)}, "
        f"fp8_true_n={getattr(layer, 'fp8_true_n', None)}, want True and {n}"
    )
    assert layer.weight.dtype == torch.uint8 and tuple(layer.weight.shape) == (k, padded), (
        f"packed weight {layer.weight.dtype} {tuple(layer.weight.shape)}, want uint8 {(k, padded)}"
    )
    meta = layer.sm70_fp8_meta
    assert meta.dtype == torch.int64 and tuple(meta.shape) == (2,), (meta.dtype, meta.shape)
    assert (layer.sm70_fp8_k_ld, layer.sm70_fp8_q_ld) == (int(meta[0]), int(meta[1])), (
        "sm70_fp8_k_ld/q_ld are not meta[0]/meta[1]"
    )
    if isinstance(ops, ReferenceSm70Ops):  # the compiled op's scale layout is its own
        want = (_cdiv(k, BLOCK), padded)
        assert tuple(layer.weight_scale_inv.shape) == want, (
            f"packed scales {tuple(layer.weight_scale_inv.shape)}, want {want}"
        )
    return method, layer, w, b, casts[0]


def _check_against_reference(
    ops: Ops, out: Any, w: Any, b: Any, x: Any, cast: tuple[Any, Any]
) -> tuple[float, int]:
    """``out`` (of a [n, k] layer on ``x``) against the float reference computed from
    the e4m3 weight and scales the layer itself quantized (``cast``, which may be a
    device's), after checking that cast against the CPU's: bit for bit with the
    stand-ins, within FP8/fp16-accumulation tolerance on a GPU. Returns the max abs
    error and how many e4m3 codes the layer's cast has other than the CPU's."""
    import torch

    n, k = w.shape
    lead = tuple(x.shape[:-1])
    assert tuple(out.shape) == (*lead, n) and out.dtype == torch.float16, (
        f"output {out.dtype} {tuple(out.shape)}, want float16 {(*lead, n)}"
    )
    differing = _check_cast(w, cast)
    q, s = cast
    ref = _dequant_reference(q[:n], s, x.reshape(-1, k).cpu()).reshape(*lead, n)
    if b is not None:
        ref = ref + b.cpu()
    got = out.cpu()
    err = float((got.float() - ref.float()).abs().max())
    if ops.exact:
        assert torch.equal(got, ref), f"N={n} K={k}: not bit-exact against the reference ({err})"
    else:  # fp32 accumulation in a different order on the GPU
        torch.testing.assert_close(got.float(), ref.float(), rtol=2e-2, atol=2e-2)
    return err, differing


def _input(ops: Ops, k: int, m: int) -> Any:
    import torch

    gen = torch.Generator().manual_seed(7 + k + m)
    return (torch.randn(2, m, k, generator=gen) * 0.5).to(torch.float16).to(ops.device)


def sm70_linear_check(ops: Ops, n: int, k: int, m: int, bias: bool) -> str:
    """A patched online fp8_per_block layer [n, k] on SM70: packed at load (rows
    padded to whole 128-row blocks, output_size_per_partition the packed width),
    one SM70 GEMM per call, sliced back to n, matching the reference."""
    sm70_ops = _import_vllm_module("vllm._sm70_ops")
    gemm_calls: list[tuple[int, ...]] = []
    real_gemm = sm70_ops.fp8_gemm_sm70_out

    def gemm_spy(out: Any, *args: Any) -> None:
        gemm_calls.append(tuple(out.shape))
        real_gemm(out, *args)

    padded = _round_up(n, BLOCK)
    with _sm70_online_fp8(ops) as f, patched(sm70_ops, "fp8_gemm_sm70_out", gemm_spy):
        method, layer, w, b, cast = _packed_layer(f, ops, n, k, bias)
        assert layer.output_size_per_partition == padded, (
            f"output_size_per_partition is {layer.output_size_per_partition}, want the "
            f"packed width {padded}: the fork's SM70 warmup sizes its GEMM output with it"
        )
        x = _input(ops, k, m)
        out = method.apply(layer, x, layer.bias)
    assert gemm_calls == [(2 * m, padded)], f"SM70 GEMM calls {gemm_calls}"
    err, differing = _check_against_reference(ops, out, w, b, x, cast)
    return (
        f"N={n} (packed {padded}) K={k}: max abs error {err:.3g} vs the float reference of "
        f"the layer's own cast ({differing} e4m3 codes other than the CPU cast's)"
    )


# K values the SM70 GEMM cannot take: K % 16 == 8 (fp8_sm70_prepare would take it,
# no GEMM kernel would) and K % 8 != 0 (fp8_sm70_prepare refuses it).
UNSUPPORTED_K = (264, 260)


def sm70_unsupported_k_check(ops: Ops) -> str:
    """A layer whose K the SM70 GEMM cannot take (e.g. a tensor-parallel vision
    projection) keeps its fp16 weight, with a warning naming the layer, and
    computes with it: never a raw kernel check."""
    import logging

    import torch

    class Collect(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.WARNING)
            self.messages: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.messages.append(record.getMessage())

    with _sm70_online_fp8(ops) as f:
        for k in UNSUPPORTED_K:
            method = f.Fp8PerBlockOnlineLinearMethod()
            layer = _make_layer(method, 256, k, ops.device, bias=True)
            w, b = layer.weight.data.clone(), layer.bias.data.clone()
            handler = Collect()
            f.logger.addHandler(handler)
            level = f.logger.level
            f.logger.setLevel(logging.WARNING)
            try:
                method.process_weights_after_loading(layer)
            finally:
                f.logger.removeHandler(handler)
                f.logger.setLevel(level)
            assert not getattr(layer, "sm70_fp8_turbomind", False), f"K={k} was packed"
            assert layer.weight.dtype == torch.float16 and tuple(layer.weight.shape) == (256, k)
            assert any(layer.prefix in msg and str(k) in msg for msg in handler.messages), (
                f"no warning names {layer.prefix} (K={k}): {handler.messages}"
            )
            x = _input(ops, k, 3)
            out = method.apply(layer, x, layer.bias)
            ref = torch.nn.functional.linear(x, w, b)
            assert torch.equal(out, ref), f"K={k}: the fp16 fallback does not compute x @ W.T + b"
    return f"K in {UNSUPPORTED_K}: kept fp16, warned by layer name, computed exactly"


# Layers the fork's SM70 warmup runs over: odd widths (padded) and 128-multiples,
# with and without a bias, each (K, packed N) distinct so that none is deduplicated;
# plus one layer with a K the GEMM cannot take, which the warmup must leave alone.
WARMUP_LAYERS = ((ODD_WIDTH, 256, False), (264, 128, True), (512, 384, False), (384, 256, True))


def sm70_warmup_check(ops: Ops) -> str:
    """The fork's own SM70 TurboMind warmup (on by default, run from the worker's
    kernel warmup even with --enforce-eager) over patched layers: one
    fp8_gemm_sm70_out per FP8 layer shape and decode M, and every layer still
    computes right afterwards."""
    from types import SimpleNamespace

    import torch

    warmup = _import_vllm_module("vllm.model_executor.warmup.awq_sm70_warmup")
    sm70_ops = warmup.sm70_ops
    calls: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    real_gemm = sm70_ops.fp8_gemm_sm70_out

    def gemm_spy(out: Any, x: Any, weight: Any, *args: Any) -> None:
        calls.append((tuple(out.shape), tuple(weight.shape)))
        real_gemm(out, x, weight, *args)

    with _sm70_online_fp8(ops) as f:
        missing = [op for op in SM70_WARMUP_GATES if not hasattr(torch.ops._C, op)]
        if missing:
            raise NotRun(
                "the fork's SM70 warmup skips FP8 layers in this build: no "
                + ", ".join(f"_C::{op}" for op in missing)
            )
        built = [_packed_layer(f, ops, n, k, bias) for n, k, bias in WARMUP_LAYERS]
        fallback = f.Fp8PerBlockOnlineLinearMethod()
        fallback_layer = _make_layer(fallback, 256, UNSUPPORTED_K[0], ops.device, bias=False)
        fallback_w = fallback_layer.weight.data.clone()
        fallback.process_weights_after_loading(fallback_layer)
        model = torch.nn.ModuleList([layer for _, layer, _, _, _ in built] + [fallback_layer])
        config = SimpleNamespace(
            speculative_config=None,
            compilation_config=SimpleNamespace(cudagraph_capture_sizes=None),
        )
        with (
            sm70_worker_device(ops) as device,
            patched_environ(
                VLLM_SM70_AWQ_WARMUP="1",
                VLLM_SM70_GEMM_LUT_PATH=None,
                # v1.3.0+: tensor-parallel tuning exchange; a single process here.
                VLLM_SM70_FP8_COORDINATED_TUNING="0",
            ),
            patched(sm70_ops, "fp8_gemm_sm70_out", gemm_spy),
        ):
            worker = SimpleNamespace(device=device, get_model=lambda: model, vllm_config=config)
            try:
                warmup.sm70_awq_warmup(worker)
            except RuntimeError as exc:
                raise AssertionError(
                    f"the fork's SM70 warmup fails on the patched layers: {exc}"
                ) from exc
            m_values = warmup._get_decode_m_values(worker)
        want = sorted(
            ((m, _round_up(n, BLOCK)), (k, _round_up(n, BLOCK)))
            for n, k, _ in WARMUP_LAYERS
            for m in m_values
        )
        assert sorted(calls) == want, (
            f"the fork's SM70 warmup made the FP8 GEMM calls {sorted(calls)}, want {want}"
        )
        for (method, layer, w, b, cast), (_, k, _) in zip(built, WARMUP_LAYERS, strict=True):
            x = _input(ops, k, 3)
            _check_against_reference(ops, method.apply(layer, x, layer.bias), w, b, x, cast)
        x = _input(ops, UNSUPPORTED_K[0], 3)
        out = fallback.apply(fallback_layer, x, None)
        assert torch.equal(out, torch.nn.functional.linear(x, fallback_w)), "fallback layer"
    return (
        f"{len(calls)} warmup GEMM calls ({len(WARMUP_LAYERS)} FP8 layer shapes x M in "
        f"{m_values}), the fp16 fallback layer skipped; every layer computes right after"
    )


# --------------------------------------------------------------------------- static tier


@check("static.installed-from-wheel", baseline=True)
def installed_from_wheel(ctx: Ctx) -> str:
    """vllm is imported from this environment's site-packages (never the source tree),
    installed as the wheel's distribution and version."""
    import importlib.metadata as md

    expected_prefix = ctx.spec.get("prefix")
    if expected_prefix:
        assert os.path.realpath(sys.prefix) == os.path.realpath(expected_prefix), (
            f"running in {sys.prefix}, not the smoke environment {expected_prefix}"
        )
    assert sys.prefix != sys.base_prefix, "not running inside a virtual environment"
    dist = md.distribution(ctx.dist)
    assert dist.version == ctx.version, (
        f"installed {ctx.dist} is {dist.version}, the wheel is {ctx.version}"
    )
    import vllm

    sites = _site_dirs()
    assert vllm.__file__ and _inside(vllm.__file__, sites), (
        f"vllm imported from {vllm.__file__}, not from {', '.join(sites)}"
    )
    forbidden = [os.path.realpath(p) for p in ctx.spec.get("forbidden_paths", [])]
    leaked = [p for p in sys.path if p and _inside(p, forbidden)]
    assert not leaked, f"sys.path contains source-tree paths: {leaked}"
    return f"vllm from {os.path.dirname(vllm.__file__)}"


@check("static.version-metadata", baseline=True)
def version_metadata(ctx: Ctx) -> str:
    """importlib.metadata.version("vllm"), version("1cat-vllm") and vllm.__version__
    all equal the wheel's version."""
    import importlib.metadata as md

    got_dist = md.version(ctx.dist)
    try:
        got_vllm = md.version("vllm")
    except md.PackageNotFoundError:
        raise AssertionError(
            f'importlib.metadata.version("vllm") raises PackageNotFoundError '
            f"(the wheel is {ctx.dist} {ctx.version})"
        ) from None
    version_mod = _import_vllm_module("vllm.version")
    got_attr = getattr(version_mod, "__version__", None)
    bad = {
        k: v
        for k, v in (
            ("version('vllm')", got_vllm),
            (f"version('{ctx.dist}')", got_dist),
            ("vllm.version.__version__", got_attr),
        )
        if v != ctx.version
    }
    assert not bad, (
        "; ".join(f"{k} is {v!r}" for k, v in bad.items()) + f", the wheel is {ctx.version!r}"
    )
    return ctx.version


@check("static.cli-version", baseline=True)
def cli_version(ctx: Ctx) -> str:
    """`vllm --version` (the installed console script) prints the wheel's version."""
    script = os.path.join(os.path.dirname(sys.executable), "vllm")
    if not os.path.exists(script):
        raise AssertionError(f"the wheel installed no `vllm` console script ({script})")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    proc, text = _run_version(script, env)
    how = ""
    if proc.returncode != 0 and _NO_PLATFORM in text and not ctx.device.get("cuda_available"):
        # No CUDA device and no `+cpu` in the version: vLLM detects no platform, and
        # the CLI (which builds `serve`'s defaults before parsing) cannot start. That
        # is this machine, not the wheel: select vLLM's own CPU platform through a
        # platform plugin that exists only for this run, and try again.
        with tempfile.TemporaryDirectory(prefix="forkpatch-cpu-platform-") as shim:
            write_cpu_platform_plugin(shim)
            proc, text = _run_version(script, {**env, "PYTHONPATH": shim})
        how = " (no CUDA device: vLLM's CPU platform selected by a platform plugin)"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if proc.returncode != 0:
        missing = _MISSING_MODULE.findall(text)
        if missing and is_third_party(missing[-1]):
            raise NotRun("`vllm --version`: " + missing_module_reason(missing[-1]))
        tail = "\n".join(lines[-8:])
        raise AssertionError(f"`vllm --version` exited {proc.returncode}:\n{tail}")
    assert ctx.version in lines, (
        f"`vllm --version` printed {lines[-1] if lines else 'nothing'!r}, want {ctx.version!r}"
    )
    return f"`vllm --version` -> {ctx.version}{how}"


_NO_PLATFORM = "Failed to infer device type"
_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named ['\"]([\w.]+)['\"]")


def _run_version(script: str, env: dict[str, str]) -> tuple[Any, str]:
    try:
        proc = subprocess.run(
            [script, "--version"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            timeout=300,
            cwd=tempfile.gettempdir(),
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("`vllm --version` did not finish in 300 s") from None
    return proc, proc.stdout.decode("utf-8", "replace")


def write_cpu_platform_plugin(directory: str) -> None:
    """A metadata-only distribution whose ``vllm.platform_plugins`` entry point
    answers ``vllm.platforms.cpu.CpuPlatform`` (vLLM's out-of-tree platform hook)."""
    info = os.path.join(directory, "forkpatch_smoke_cpu_platform-0.dist-info")
    os.makedirs(info)
    files = {
        os.path.join(
            info, "METADATA"
        ): "Metadata-Version: 2.1\nName: forkpatch-smoke-cpu-platform\nVersion: 0\n",
        os.path.join(info, "entry_points.txt"): "[vllm.platform_plugins]\n"
        "forkpatch_smoke_cpu = forkpatch_smoke_cpu_platform:activate\n",
        os.path.join(
            directory, "forkpatch_smoke_cpu_platform.py"
        ): 'def activate():\n    return "vllm.platforms.cpu.CpuPlatform"\n',
    }
    for path, text in files.items():
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)


@check("static.import-patched-modules", baseline=True)
def import_patched_modules(ctx: Ctx) -> str:
    """Every module the patches touch imports from the installed wheel."""
    modules = list(ctx.spec.get("modules") or ["vllm"])
    sites = _site_dirs()
    for name in modules:
        mod = _import_vllm_module(name)
        where = getattr(mod, "__file__", None)
        assert where and _inside(where, sites), f"{name} imported from {where}, not the venv"
    return f"{len(modules)} module(s): {', '.join(modules)}"


@check("static.provenance", baseline=True)
def provenance(ctx: Ctx) -> str:
    """The installed dist-info carries the wheel's forkpatch provenance, byte for byte,
    and it matches the series (when the smoke run has one)."""
    import importlib.metadata as md

    problems = list(ctx.spec.get("provenance_problems") or [])
    want = ctx.spec.get("provenance_sha256")
    text = md.distribution(ctx.dist).read_text(PROVENANCE_FILENAME)
    if want is None:
        problems.insert(0, f"the wheel has no {PROVENANCE_FILENAME}: it was not built by forkpatch")
    elif text is None:
        problems.insert(0, f"the installed dist-info has no {PROVENANCE_FILENAME}")
    else:
        got = hashlib.sha256(text.encode("utf-8")).hexdigest()
        if got != want:
            problems.insert(
                0, f"installed {PROVENANCE_FILENAME} has sha256 {got}, the wheel's is {want}"
            )
    assert not problems, "; ".join(problems)
    return "provenance installed intact" + (
        " and matches the series" if ctx.spec.get("series_compared") else ""
    )


@check("static.capability-floor-cpu", needs=("torch",))
def capability_floor_cpu(ctx: Ctx) -> str:
    """capability-floor with the CPU stand-in SM70 ops and a mocked (7, 0) device:
    7.0 is admitted for fp8_per_block only, as the fork's switches allow."""
    return capability_floor_check(_reference_ops())


@check("static.odd-width-padding-cpu", needs=("torch",))
def odd_width_padding_cpu(ctx: Ctx) -> str:
    """odd-width-padding helpers on CPU: 4,120 rows padded to 4,224 and sliced back,
    plus an odd-width layer with a bias through the stand-in SM70 linear."""
    ops = _reference_ops()
    ops.install()
    first = padding_helpers_check(ops)
    return first + "; " + sm70_linear_check(ops, 264, 128, 4, bias=True)


@check("static.eager-block-cast-cpu", needs=("torch",))
def eager_block_cast_cpu(ctx: Ctx) -> str:
    """eager-block-cast: a mocked SM70 takes the eager cast, other devices the compiled one."""
    return eager_block_cast_check(_reference_ops())


@check("static.packed-repack-cpu", needs=("torch",))
def packed_repack_cpu(ctx: Ctx) -> str:
    """packed-repack on CPU: the 4,120-row per-block FP8 linear is packed at load,
    dispatched to the (stand-in) SM70 GEMM and bit-exact against the float reference;
    a K the SM70 GEMM cannot take falls back to fp16 by name."""
    ops = _reference_ops()
    a = sm70_linear_check(ops, ODD_WIDTH, 256, 3, bias=False)
    b = sm70_linear_check(ops, 512, 384, 5, bias=True)
    return f"{a}; {b}; {sm70_unsupported_k_check(ops)}"


@check("static.sm70-warmup-cpu", needs=("torch",))
def sm70_warmup_cpu(ctx: Ctx) -> str:
    """The fork's own SM70 warmup over patched layers (odd and 128-multiple widths,
    with and without a bias) with the CPU stand-in ops: it must not fail."""
    return sm70_warmup_check(_reference_ops())


# --------------------------------------------------------------------------- gpu tier


@check("gpu.cuda-compute", baseline=True)
def cuda_compute(ctx: Ctx) -> str:
    """Every visible CUDA device answers a real computation: a 1024x1024 matmul
    matches the CPU result (a GPU can be "up" and not ready)."""
    torch = _torch()
    lines = []
    for i in range(torch.cuda.device_count()):
        gen = torch.Generator().manual_seed(1234 + i)
        a = torch.randn(1024, 1024, generator=gen)
        b = torch.randn(1024, 1024, generator=gen)
        ref = a.double() @ b.double()
        start = time.monotonic()
        with torch.cuda.device(i):
            got = (a.to(f"cuda:{i}") @ b.to(f"cuda:{i}")).cpu()
            torch.cuda.synchronize(i)
        elapsed = time.monotonic() - start
        err = float((got.double() - ref).abs().max())
        # float32 (TF32 off by default for matmul) over K=1024: well under 1e-2.
        assert err < 5e-2, f"cuda:{i} matmul differs from the CPU result by {err}"
        lines.append(f"cuda:{i} ok ({elapsed * 1000:.0f} ms, max err {err:.2g})")
    return "; ".join(lines)


# --------------------------------------------------------------------------- sm70 tier


_TORCH_PIN = re.compile(r"^torch\s*==\s*([\w.+!-]+)\s*(?:;.*)?$")


def _cuda_number(version: str) -> int:
    """ "12.8" -> 12080, as cuDriverGetVersion counts."""
    major, _, minor = version.partition(".")
    return int(major) * 1000 + int(minor or 0) * 10


def _driver_cuda() -> int:
    """The CUDA version the installed driver supports (cuDriverGetVersion of libcuda)."""
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise AssertionError(f"the NVIDIA driver's libcuda.so.1 does not load: {exc}") from None
    out = ctypes.c_int(0)
    rc = lib.cuDriverGetVersion(ctypes.byref(out))
    assert rc == 0, f"cuDriverGetVersion failed with CUDA error {rc}"
    return out.value


@check("sm70.cuda-stack", baseline=True)
def sm70_cuda_stack(ctx: Ctx) -> str:
    """The box fits the wheel: the environment's torch is the version the wheel pins
    (Requires-Dist: torch==...), and the driver supports that torch's CUDA."""
    import importlib.metadata as md

    torch = _torch()
    pins = [
        m.group(1)
        for r in md.requires(ctx.dist) or []
        if (m := _TORCH_PIN.match(r.strip())) is not None
    ]
    if not pins:
        raise NotRun(f"{ctx.dist} {ctx.version} pins no torch version (Requires-Dist: torch==)")
    have = str(torch.__version__)
    assert have.split("+")[0] == pins[0].split("+")[0], (
        f"the smoke environment has torch {have}, the wheel pins torch=={pins[0]}"
    )
    cuda = getattr(torch.version, "cuda", None)
    assert cuda, f"torch {have} is a CPU-only build"
    driver = _driver_cuda()
    shown = f"{driver // 1000}.{driver % 1000 // 10}"
    assert driver >= _cuda_number(cuda), (
        f"the driver supports CUDA {shown}, the wheel's torch {have} needs CUDA {cuda}"
    )
    return f"torch {have} (pinned {pins[0]}), CUDA {cuda}, driver supports CUDA {shown}"


@check("sm70.capability", baseline=True)
def sm70_capability(ctx: Ctx) -> str:
    """torch and vllm's platform both read compute capability (7, 0)."""
    torch = _torch()
    caps = [tuple(torch.cuda.get_device_capability(i)) for i in range(torch.cuda.device_count())]
    assert caps and all(c == SM70 for c in caps), f"torch reads capabilities {caps}"
    platforms = _import_vllm_module("vllm.platforms")
    got = tuple(platforms.current_platform.get_device_capability())
    assert got == SM70, f"vllm's current_platform reads {got}"
    return f"{len(caps)} device(s) at (7, 0)"


@check("sm70.ops-registered")
def sm70_ops_registered(ctx: Ctx) -> str:
    """The wheel's SM70 FP8 ops (_C::fp8_sm70_prepare, _C::fp8_gemm_sm70_out) are registered."""
    RealSm70Ops().install()
    return "fp8_sm70_prepare and fp8_gemm_sm70_out registered"


@check("sm70.fp8-per-block-config")
def sm70_fp8_per_block_config(ctx: Ctx) -> str:
    """The online fp8_per_block config is accepted on this (7, 0) device (and the
    online schemes without an SM70 path are not)."""
    detail = capability_floor_check(RealSm70Ops())
    qmod = _import_vllm_module("vllm.model_executor.layers.quantization")
    methods = getattr(qmod, "QUANTIZATION_METHODS", None)
    if methods is not None:
        assert "fp8_per_block" in methods, "fp8_per_block is not a known quantization method"
    config = _online_config("fp8_per_block")
    floor = config.get_min_capability()
    assert floor <= 70, f"{type(config).__name__}.get_min_capability() is {floor} on this device"
    return f"{detail}; {type(config).__name__} for fp8_per_block: min capability {floor}"


@check("sm70.odd-width-linear")
def sm70_odd_width_linear(ctx: Ctx) -> str:
    """A 4,120-row per-block FP8 linear through the real SM70 GEMM matches the float
    reference within FP8 tolerance."""
    return sm70_linear_check(RealSm70Ops(), ODD_WIDTH, 256, 3, bias=False)


@check("sm70.warmup")
def sm70_warmup(ctx: Ctx) -> str:
    """The fork's own SM70 warmup runs the real SM70 GEMM over patched layers (odd
    and 128-multiple widths, with and without a bias, and an fp16-fallback layer)
    without failing, and every layer matches the float reference afterwards."""
    return sm70_warmup_check(RealSm70Ops())


TINY_MODEL_INTERMEDIATE = 520


@check("sm70.tiny-model-generates")
def sm70_tiny_model_generates(ctx: Ctx) -> str:
    """A tiny Qwen2-shaped model, made here with random weights, loads with
    fp8_per_block and generates tokens; its fused gate_up_proj is 1,040 wide (not a
    multiple of 128, as Qwen3.5's in_proj_qkvz), and the worker's kernel warmup
    (the fork's SM70 warmup, run even with enforce_eager) goes over it."""
    torch = _torch()
    try:
        from transformers import Qwen2Config, Qwen2ForCausalLM
    except ImportError as exc:
        raise NotRun(f"transformers is not importable ({exc}); it makes the tiny model") from None
    llm_mod = _import_vllm_module("vllm")
    tmp = tempfile.mkdtemp(prefix="forkpatch-tiny-model-")
    try:
        torch.manual_seed(0)
        cfg = Qwen2Config(
            vocab_size=1024,
            hidden_size=256,
            # gate_up_proj fuses 2 x 520 = 1,040 rows: padded to 1,152 for the SM70
            # GEMM; down_proj's K = 520 is no multiple of 16: it stays fp16.
            intermediate_size=TINY_MODEL_INTERMEDIATE,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
            tie_word_embeddings=False,
        )
        Qwen2ForCausalLM(cfg).to(torch.float16).save_pretrained(tmp, safe_serialization=True)
        llm = llm_mod.LLM(
            model=tmp,
            skip_tokenizer_init=True,
            dtype="float16",
            quantization="fp8_per_block",
            max_model_len=256,
            enforce_eager=True,
            gpu_memory_utilization=0.3,
            max_num_seqs=4,
        )
        params = llm_mod.SamplingParams(
            max_tokens=8, temperature=0.0, ignore_eos=True, detokenize=False
        )
        outs = llm.generate([{"prompt_token_ids": [1, 2, 3, 4, 5]}], params)
        tokens = list(outs[0].outputs[0].token_ids)
        assert len(tokens) == 8, f"generated {len(tokens)} tokens, want 8"
        return f"generated {tokens}"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
JIT_TOLERANCE = 2e-2  # abs and rel, as for the linear checks on a GPU

_PTX: PtxSm70Ops | None = None


def _ptx_ops() -> PtxSm70Ops:
    global _PTX
    if _PTX is None:
        _PTX = PtxSm70Ops(str(_SPEC["ptx_lib"]))
    _PTX.install()
    return _PTX


def _fp8_weight(n: int, k: int, padded: int, seed: int) -> tuple[Any, Any]:
    """A random e4m3 weight [padded, k] whose rows past n are +0.0, and fp32 block
    scales [padded/128, k/128], on the CPU."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    q = torch.zeros(padded, k, dtype=torch.float8_e4m3fn)
    q[:n] = (torch.randn(n, k, generator=gen) * 100).clamp(-448, 448).to(torch.float8_e4m3fn)
    s = torch.rand(_cdiv(padded, BLOCK), _cdiv(k, BLOCK), generator=gen) * 2e-3 + 1e-4
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
    return (
        f"fork {str(m['fork_commit'])[:12]}, {m.get('compiler')}: {sass}; on {name} "
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


@check("gpu-jit.kernel-matrix")
def jit_kernel_matrix(ctx: Ctx) -> str:
    """fp8_sm70_prepare + fp8_gemm_sm70_out over N in {4,120 padded to 4,224, 4,096,
    1,024, 384} x M in {1, 3, 16, 64, 257}: within FP8 tolerance of a float64
    reference of the same e4m3 weights, padded columns exactly 0, a repeated call
    bit-identical."""
    import torch

    ops = _ptx_ops()
    rows = []
    worst = 0.0
    for n in JIT_WIDTHS:
        padded = _round_up(n, BLOCK)
        q, s = _fp8_weight(n, JIT_K, padded, seed=n)
        packed = torch.ops._C.fp8_sm70_prepare(q.cuda(), s.cuda(), SM70_GROUP, False)
        errs = []
        for m in JIT_M:
            gen = torch.Generator().manual_seed(m * 7 + n)
            x = (torch.randn(m, JIT_K, generator=gen) * 0.5).to(torch.float16)
            out = _gemm(ops, x.cuda(), packed, padded)
            again = _gemm(ops, x.cuda(), packed, padded)
            assert torch.equal(out, again), f"N={n} M={m}: a repeated call is not bit-identical"
            got = out.cpu()
            assert not got[:, n:].any(), f"N={n} M={m}: padded columns {n}..{padded} are not 0"
            ref = _dequant_reference(q[:n], s, x)
            err = float((got[:, :n].float() - ref.float()).abs().max())
            torch.testing.assert_close(
                got[:, :n].float(), ref.float(), rtol=JIT_TOLERANCE, atol=JIT_TOLERANCE,
                msg=lambda text, n=n, m=m: f"N={n} M={m}: {text}",
            )  # fmt: skip
            errs.append(f"M={m}: {err:.3g}")
            worst = max(worst, err)
        label = f"N={n}" + (f" (padded {padded})" if padded != n else "")
        rows.append(f"{label} {', '.join(errs)}")
    return f"K={JIT_K}, max abs error {worst:.3g}; " + "; ".join(rows)


@check("gpu-jit.refusals")
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


_PROBE = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("incheck_probe", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
sys.modules["incheck_probe"] = mod
spec.loader.exec_module(mod)
mod.run_spec()["ptx_lib"] = sys.argv[2]
print("PROBE " + json.dumps(getattr(mod, sys.argv[3])()), flush=True)
"""


def _probe_argv(probe: str) -> list[str]:
    """A process of its own running ``probe`` (a function of this file) with the library."""
    lib = str(_SPEC["ptx_lib"])
    return [sys.executable, "-c", _PROBE, os.path.abspath(__file__), lib, probe]


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
    out = _gemm(ops, x.cuda(), packed, ODD_WIDTH).cpu().float()
    ref = _dequant_reference(q, s, x).float()
    bad = ((out - ref).abs() > JIT_TOLERANCE * (1 + ref.abs())) | out.isnan()
    cols = [int(i) for i in bad.any(0).nonzero().flatten()]
    return {"wrong_columns": len(cols), "first": cols[:5], "last": cols[-3:]}


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


@check("gpu-jit.unpadded-width")
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


# --------------------------------------------------------------------------- device + runner


def probe_device() -> dict[str, Any]:
    """What the environment has: torch, CUDA devices (name, capability), driver."""
    info: dict[str, Any] = {
        "torch": None,
        "cuda_available": False,
        "devices": [],
        "driver": None,
        "torch_cuda": None,
        "reason": None,
    }
    try:
        import torch
    except ModuleNotFoundError as exc:
        info["reason"] = missing_module_reason(exc.name or "torch")
        return info
    except ImportError as exc:
        info["reason"] = f"torch is not importable in the smoke environment ({exc})"
        return info
    info["torch"] = torch.__version__
    info["torch_cuda"] = getattr(torch.version, "cuda", None)
    try:
        available = torch.cuda.is_available()
    except Exception as exc:
        info["reason"] = f"torch.cuda.is_available() raised {type(exc).__name__}: {exc}"
        return info
    if not available:
        info["reason"] = "no CUDA device: torch.cuda.is_available() is False" + (
            "" if info["torch_cuda"] else " (torch is a CPU-only build)"
        )
        return info
    info["cuda_available"] = True
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        info["devices"].append(
            {
                "index": i,
                "name": props.name,
                "capability": [props.major, props.minor],
                "memory_gib": round(props.total_memory / 2**30, 1),
            }
        )
    smi = shutil.which("nvidia-smi")
    if smi:
        with contextlib.suppress(Exception):
            out = subprocess.run(
                [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                timeout=30,
                check=False,
            )
            versions = sorted({ln.strip() for ln in out.stdout.decode().splitlines() if ln.strip()})
            info["driver"] = ", ".join(versions) or None
    return info


def gate(defn: CheckDef, device: dict[str, Any]) -> str | None:
    """Why ``defn`` cannot run with this ``device`` (None: it can)."""
    needs = set(defn.needs)
    if needs & {"torch", "cuda", "sm70", "jit"} and device.get("torch") is None:
        return device.get("reason") or "torch is not importable"
    if needs & {"cuda", "sm70", "jit"} and not device.get("cuda_available"):
        return device.get("reason") or "no CUDA device"
    if "jit" in needs:
        for d in device.get("devices", []):
            if tuple(d["capability"]) < JIT_MIN_CAPABILITY:
                return (
                    f"device {d['name']} has capability {tuple(d['capability'])}: the "
                    f"driver cannot JIT compute_70 PTX below {JIT_MIN_CAPABILITY}"
                )
        if not _SPEC.get("ptx_lib"):
            return "no PTX library given (forkpatch smoke --ptx-lib, built by ci/sm70-ptx-lib.sh)"
    if "sm70" in needs:
        for d in device.get("devices", []):
            cap = tuple(d["capability"])
            if cap != SM70:
                return f"device {d['name']} has capability {cap}, not (7, 0)"
    return None


def run_one(defn: CheckDef, ctx: Ctx) -> dict[str, Any]:
    start = time.monotonic()
    reason = gate(defn, ctx.device)
    if reason is not None:
        return {"id": defn.id, "outcome": NOT_RUN, "duration_s": 0.0, "detail": reason}
    try:
        detail = defn.func(ctx)
        outcome = PASSED
    except NotRun as exc:
        outcome, detail = NOT_RUN, str(exc)
    except ModuleNotFoundError as exc:
        # A module the environment lacks (torch, fastapi, ...) is not the wheel's
        # fault: the check could not run. One the wheel should provide is.
        if exc.name and is_third_party(exc.name):
            outcome, detail = NOT_RUN, missing_module_reason(exc.name)
        else:
            outcome = FAILED
            detail = f"the wheel lacks a module of its own: {exc}\n{_short_tb(exc)}"
    except AssertionError as exc:
        outcome = FAILED
        detail = str(exc) or "assertion failed: " + _short_tb(exc)
    except Exception as exc:
        outcome = ERROR
        detail = f"{type(exc).__name__}: {exc}\n{_short_tb(exc)}"
    return {
        "id": defn.id,
        "outcome": outcome,
        "duration_s": round(time.monotonic() - start, 3),
        "detail": detail or "",
    }


def _short_tb(exc: BaseException, lines: int = 12) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return "\n".join(text.rstrip().splitlines()[-lines:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="incheck")
    parser.add_argument("--spec", required=True, help="JSON file with what the host expects")
    parser.add_argument("--out", required=True, help="JSON-lines results file")
    args = parser.parse_args(argv)
    with open(args.spec, encoding="utf-8") as fh:
        spec = json.load(fh)
    _SPEC.update(spec)
    ids = list(spec.get("checks", []))
    device = probe_device()
    ctx = Ctx(spec=spec, device=device)
    with open(args.out, "a", encoding="utf-8") as out:

        def emit(record: dict[str, Any]) -> None:
            out.write(json.dumps(record) + "\n")
            out.flush()

        emit(
            {
                "kind": "env",
                "python": sys.version.split()[0],
                "executable": sys.executable,
                "prefix": sys.prefix,
                "sys_path": sys.path,
                "device": device,
            }
        )
        for cid in ids:
            defn = REGISTRY.get(cid)
            if defn is None:
                emit(
                    {
                        "kind": "check",
                        "id": cid,
                        "outcome": ERROR,
                        "duration_s": 0.0,
                        "detail": "unknown check id (forkpatch and incheck disagree)",
                    }
                )
                continue
            emit({"kind": "start", "id": cid})
            emit({"kind": "check", **run_one(defn, ctx)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
