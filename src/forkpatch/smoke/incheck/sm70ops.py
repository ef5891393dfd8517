"""The fork's SM70 FP8 ops as the checks use them: :class:`ReferenceSm70Ops` (CPU
stand-ins as strict as the kernels, registered under the ops' real schemas) and
:class:`RealSm70Ops` (the wheel's compiled ops on a V100)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .registry import import_vllm_module

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


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def round_up(a: int, b: int) -> int:
    return cdiv(a, b) * b


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


def prepare_checks(
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
    _tm_check(scales.size(0) == cdiv(n, group_size), f"{op}: output scale block mismatch.")
    _tm_check(scales.size(1) == cdiv(k, group_size), f"{op}: input scale block mismatch.")
    return n, k


def gemm_type_checks(
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
    n, k = prepare_checks(qweight, scales, group_size, _on_standin_device)
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
    if _MODE["fault"] == "misplaced-scales":  # column block b+1's scales packed as b's
        group_scales = group_scales.roll(-group_size, dims=1)
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
    gemm_type_checks(out, x, weight, scales, _on_standin_device)
    _tm_check(group_size == SM70_GROUP, f"{op}: only group_size=128 is supported.")
    _tm_check(
        all(t.dim() == 2 for t in (x, weight, scales, out)),
        f"{op}: input, weight, scales and output must be 2D [stand-in: the op reads "
        f"sizes 0 and 1 of each]",
    )
    m, k = x.shape
    n = weight.size(1)
    _tm_check(weight.size(0) == k, f"{op}: weight shape mismatch.")
    _tm_check(scales.size(0) == cdiv(k, group_size), f"{op}: scale groups mismatch.")
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
    acc = torch.float32 if _MODE["accumulate"] == "float32" else torch.float64
    result = (x.to(acc) @ dequant.to(acc)).to(out.dtype)
    out.copy_(fault_output(result, _MODE["fault"]))


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


def awq_gemm_sm70_out_gate(*args: Any) -> None:
    raise RuntimeError(
        "awq_gemm_sm70_out: not covered by the stand-in ops; it is registered because the "
        "fork's SM70 warmup runs only when it exists, and no AWQ layer takes part here"
    )


# The ops the series and the fork's SM70 warmup use: name, schema (as the fork's
# csrc/torch_bindings.cpp defines it), CPU stand-in.
SM70_OPS: tuple[tuple[str, str, Callable[..., Any]], ...] = (
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
        awq_gemm_sm70_out_gate,
    ),
)
# What the fork's SM70 warmup (model_executor/warmup/awq_sm70_warmup.py) checks for
# before it warms FP8 dense layers: without them it skips them.
SM70_WARMUP_GATES = ("awq_gemm_sm70_out", "fp8_gemm_sm70_out_meta")


# How the stand-ins compute: float64 accumulation and no fault (ReferenceSm70Ops), or as a
# GPU does, fp32 accumulation, with the negative controls' fault (GpuLikeSm70Ops).
_MODE: dict[str, str] = {"accumulate": "float64", "fault": ""}
# The faults, as the PTX library's test-only switch (FORKPATCH_PTX_FAULT) spells them.
FAULTS = ("scale=F", "zero-cols=A-B", "misplaced-scales")


def parse_fault(fault: str) -> tuple[str, float, int, int]:
    """("scale", F, 0, 0), ("zero-cols", 1.0, A, B), ("misplaced-scales", ...) or ("", ...)."""
    if not fault:
        return "", 1.0, 0, 0
    kind, _, value = fault.partition("=")
    try:
        if kind == "scale":
            return kind, float(value), 0, 0
        if kind == "zero-cols":
            first, _, last = value.partition("-")
            return kind, 1.0, int(first), int(last)
    except ValueError:
        pass
    if fault == "misplaced-scales":
        return fault, 1.0, 0, 0
    raise ValueError(f"unknown fault {fault!r} (one of {', '.join(FAULTS)})")


def fault_output(result: Any, fault: str) -> Any:
    """The GEMM's fp16 ``result`` [m, n] with ``fault`` applied: times F (scale=F), or
    columns A to B, both included, set to 0 (zero-cols=A-B)."""
    kind, factor, first, last = parse_fault(fault)
    if kind == "scale":
        return (result.float() * factor).to(result.dtype)
    if kind == "zero-cols":
        result = result.clone()
        result[:, first : last + 1] = 0  # A to B, both included
    return result


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
        for op, schema, impl in SM70_OPS:
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


class GpuLikeSm70Ops(ReferenceSm70Ops):
    """The stand-ins computing as a GPU kernel does (fp32 accumulation, so the checks
    compare within their tolerance, not bit for bit), optionally with one fault
    (:data:`FAULTS`, the PTX library's switch's spelling): the negative controls on the
    CPU, which every check on a GPU must catch."""

    name = "gpu-like"
    exact = False

    def __init__(self, fault: str = "") -> None:
        super().__init__()
        parse_fault(fault)
        self.fault = fault

    def install(self) -> None:
        super().install()
        _MODE.update(accumulate="float32", fault=self.fault)

    def uninstall(self) -> None:
        super().uninstall()
        _MODE.update(accumulate="float64", fault="")


class RealSm70Ops:
    """The wheel's compiled SM70 ops on a real 7.0 GPU."""

    name = "real"
    device = "cuda"
    exact = False
    can_toggle = False

    def install(self) -> None:
        import torch

        import_vllm_module("vllm._sm70_ops")  # loads vllm._C
        for op in ("fp8_sm70_prepare", "fp8_gemm_sm70_out"):
            assert hasattr(torch.ops._C, op), f"this build has no _C::{op}"

    def uninstall(self) -> None:
        pass


Ops = Any  # ReferenceSm70Ops | RealSm70Ops | PtxSm70Ops (kept loose: this package runs on 3.8+)

_REFERENCE: ReferenceSm70Ops | None = None


def reference_ops() -> ReferenceSm70Ops:
    """The CPU stand-ins of this process (one set: installed once, shared by the checks)."""
    global _REFERENCE
    if _REFERENCE is None:
        _REFERENCE = ReferenceSm70Ops()
    return _REFERENCE


def uninstall_reference_ops() -> None:
    """Take this process's CPU stand-ins out of torch.ops._C, if they were installed."""
    if _REFERENCE is not None:
        _REFERENCE.uninstall()
