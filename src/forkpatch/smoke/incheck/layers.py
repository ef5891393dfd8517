"""The SM70 layer checks shared by the tiers: each takes the ops (CPU stand-ins, the
wheel's own on a V100, or the PTX library) and drives the patched vLLM layers, the
fork's SM70 warmup included."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from .ptxlib import PtxSm70Ops
from .registry import (
    BLOCK,
    HOOK_ABSENT,
    ODD_WIDTH,
    SM70,
    NotRun,
    import_vllm_module,
    patched,
)
from .sm70ops import SM70_WARMUP_GATES, Ops, RealSm70Ops, ReferenceSm70Ops, cdiv, round_up


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
    return import_vllm_module("vllm.model_executor.layers.quantization.online.fp8")


def online_config(scheme: str) -> Any:
    """The OnlineQuantizationConfig that `--quantization SCHEME` gives (as
    VllmConfig builds it through get_quant_config)."""
    qconf = import_vllm_module("vllm.config.quantization")
    base = import_vllm_module("vllm.model_executor.layers.quantization.online.base")
    return base.OnlineQuantizationConfig(args=qconf.resolve_quantization_config(scheme, None))


# Rows this small have block scales in fp16's subnormal range, where the kernel's
# fp16 dequantization (one rounding per product) visibly differs from an exact one.
SMALL_AMPLITUDE = 3e-5


def dequant_weight(q: Any, s: Any) -> Any:
    """The fp16 weight [n, k] the kernel computes with, for an e4m3 weight [n, k] and its
    fp32 block scales: fp16 scales, each product rounded to fp16 (as __hmul rounds it)."""
    import torch

    n, k = q.shape
    s_full = s.to(torch.float16).repeat_interleave(BLOCK, 0)[:n]
    s_full = s_full.repeat_interleave(BLOCK, 1)[:, :k]
    return (q.to(torch.float16).float() * s_full.float()).to(torch.float16)


def dequant_reference(q: Any, s: Any, x: Any) -> Any:
    """x @ dequant(q, s).T for an e4m3 weight [n, k] and its fp32 block scales,
    dequantized as the kernel does (fp16 scales, each product rounded to fp16),
    in float64, rounded once to x's dtype; on the CPU."""
    w = dequant_weight(q, s)
    return (x.double() @ w.t().contiguous().double()).to(x.dtype)


# ---- The tolerance, from the reference's own rounding. The kernel multiplies fp16 inputs
# by the same fp16 weight as the reference (dequant_weight), accumulates the K products in
# fp32 and rounds the sum to fp16 once. Against the reference (the exact sum, rounded to
# fp16 once), an element can differ by the fp32 accumulation error, at most
# ACCUMULATION_ROUNDINGS * K * 2**-24 * sum(|x| |w|) (the classic bound for K additions,
# doubled for a kernel that adds split partial sums), plus one fp16 step of the element's
# own magnitude (the two roundings to fp16 can fall on either side of a step). A bias
# added in fp16 afterwards rounds once more: one more step of the result's magnitude.
# Nothing else: a kernel 0.1% off in scale, one missing column or one misplaced block
# scale is many steps off.
ACCUMULATION_ROUNDINGS = 2
FP32_UNIT = 2.0**-24
FP16_MANTISSA = 10
FP16_MIN_NORMAL = 2.0**-14
# Every output column must be this many times its tolerance somewhere, so that a column
# computed as zero (or scaled, or from another block's scales) cannot pass unseen.
COLUMN_SIGNAL = 16.0


def fp16_step(magnitude: Any) -> Any:
    """The spacing of fp16 numbers at ``magnitude`` (float64 tensor, >= 0): 2**(e - 10)
    for a normal number of exponent e, 2**-24 below fp16's smallest normal."""
    import torch

    e = torch.floor(torch.log2(magnitude.clamp(min=FP16_MIN_NORMAL)))
    return torch.exp2(e - FP16_MANTISSA)


def kernel_tolerance(x: Any, w16: Any, bias: Any = None) -> tuple[Any, Any]:
    """The reference (float64, before rounding) and each element's tolerance [m, n] for
    x [m, k] @ w16 [n, k].T through an fp32-accumulating kernel, rounded to fp16 (and
    ``bias`` added in fp16), as derived above; on the CPU, float64."""
    xd, wd = x.double().cpu(), w16.double().cpu()
    k = xd.shape[-1]
    exact = xd @ wd.t()
    spread = xd.abs() @ wd.abs().t()
    accumulation = ACCUMULATION_ROUNDINGS * k * FP32_UNIT * spread
    tol = accumulation + fp16_step(exact.abs() + accumulation)
    if bias is not None:
        with_bias = exact + bias.double().cpu()
        tol = tol + fp16_step(with_bias.abs() + tol)
    return exact, tol


def assert_within_tolerance(
    got: Any, ref: Any, tol: Any, exact: Any, what: str, *, columns_seen: bool = True
) -> float:
    """Each element of ``got`` within its own tolerance of ``ref`` (both [m, n], on the
    CPU), and (``columns_seen``) every column's reference far above its tolerance in
    some row (:func:`assert_columns_seen`). Returns the worst error as a fraction of its
    tolerance."""
    import torch

    err = (got.double() - ref.double()).abs()
    err = torch.where(torch.isnan(err), torch.full_like(err, float("inf")), err)
    ratio = err / tol
    worst = float(ratio.max())
    if worst > 1.0:
        flat = int(ratio.argmax())
        row, col = divmod(flat, ratio.shape[-1])
        bad = ratio > 1.0
        cols = bad.any(0).nonzero().flatten().tolist()
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {ratio.numel()} elements outside their tolerance "
            f"(from the reference's rounding: fp32 accumulation over K plus one fp16 step), "
            f"in {len(cols)} column(s) {_ranges(cols)}; worst at [{row}, {col}]: got "
            f"{float(got[row, col]):.6g}, want {float(ref[row, col]):.6g} +- "
            f"{float(tol[row, col]):.3g} ({worst:.3g} x the tolerance)"
        )
    if columns_seen:
        assert_columns_seen(column_signal(exact, tol), what)
    return worst


def column_signal(exact: Any, tol: Any) -> Any:
    """Per column, the largest reference as a multiple of its tolerance (over the rows)."""
    return (exact.abs() / tol).amax(0)


def assert_columns_seen(signal: Any, what: str) -> None:
    """Every column of a check's output is seen: somewhere :data:`COLUMN_SIGNAL` times
    its tolerance, so that a column computed as zero, scaled or from another block's
    scales fails instead of passing within the tolerance."""
    quiet = (signal < COLUMN_SIGNAL).nonzero().flatten().tolist()
    assert not quiet, (
        f"{what}: the check's inputs give {len(quiet)} column(s) {_ranges(quiet)} no output "
        f"above {COLUMN_SIGNAL:g} x its tolerance: a wrong column there would go unseen"
    )


def _ranges(cols: list[int]) -> str:
    """[0, 1, 2, 7] -> "0-2, 7" (the first few runs)."""
    runs: list[list[int]] = []
    for c in cols:
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    text = ", ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in runs[:6])
    return text + (", ..." if len(runs) > 6 else "")


def reference_cast(w: Any, cast: tuple[Any, Any]) -> tuple[Any, Any]:
    """The e4m3 weight and scales the reference is computed from: the layer's own cast
    (``cast``, checked against the CPU's by :func:`_check_cast`), never the CPU's cast of
    the fp16 weight: a device's cast rounds some codes the other way."""
    return cast


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
    padded = round_up(n, BLOCK)
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
    random fp16 weights; its first 128 rows (and their bias) are of SMALL_AMPLITUDE."""
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
        b = torch.randn(n, generator=gen) * 0.1
        # The small rows' bias is as small as their outputs: a bias far larger would round
        # away (in fp16) the very outputs a wrong kernel gets wrong there.
        b[:BLOCK] *= SMALL_AMPLITUDE / 0.05
        b = b.to(torch.float16).to(device)
        layer.bias = torch.nn.Parameter(b, requires_grad=False)
    return layer


# The check bodies, on the ops given (reference stand-ins, the real ones or the PTX
# library's). Public: each tier's registered checks (static.py, gpu.py, gpujit.py) call
# them, and so does the real-fork tier on a patched source checkout
# (tests/support/patched_checks.py).


def capability_floor_check(ops: Ops) -> str:
    """What VllmConfig's capability check admits: 7.0 for fp8_per_block with the
    SM70 ops and the fork's switches on, 7.5 for every other online scheme and
    for the class-level (scheme-less) question; MoE layers refused by name."""
    base = import_vllm_module("vllm.model_executor.layers.quantization.online.base")
    cls = base.OnlineQuantizationConfig
    schemes = ("fp8_per_block", "fp8_per_tensor", "mxfp8", "int8_per_channel_weight_only")
    want = {s: 70 if s == "fp8_per_block" else 75 for s in schemes}
    ops.install()
    with device_capability(ops, SM70), patched_environ(**_SM70_SWITCHES_DEFAULT):
        got = {s: online_config(s).get_min_capability() for s in schemes}
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
                got_env = online_config("fp8_per_block").get_min_capability()
            assert got_env == floor, f"fp8_per_block floor with {env} is {got_env}, want {floor}"
        detail = _moe_refused(base)
    if not ops.can_toggle:
        return f"floor 70 for fp8_per_block on (7, 0), 75 for the other schemes; {detail}"
    for cap in [(7, 5), (8, 0), (8, 9), (9, 0), (12, 0)]:
        with device_capability(ops, cap):
            got = {s: online_config(s).get_min_capability() for s in schemes}
        assert set(got.values()) == {75}, f"floors on {cap}: {got}, want 75"
    ops.uninstall()
    try:
        with device_capability(ops, SM70):
            got = online_config("fp8_per_block").get_min_capability()
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

    moe_cls = import_vllm_module("vllm.model_executor.layers.fused_moe").RoutedExperts
    layer = moe_cls.__new__(moe_cls)
    torch.nn.Module.__init__(layer)
    prefix = "model.layers.3.mlp.experts"
    try:
        online_config("fp8_per_block").get_quant_method(layer, prefix=prefix)
    except ValueError as exc:
        assert prefix in str(exc), f"the MoE refusal does not name the layer: {exc}"
        assert '{"linear": "fp8_per_block"}' in str(exc), f"no way out in: {exc}"
    else:
        raise AssertionError(f"fp8_per_block on SM70 accepted the MoE layer {prefix}")
    # The way out it names: linear layers only, which 7.0 admits.
    qconf = import_vllm_module("vllm.config.quantization")
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

    dg = import_vllm_module("vllm.utils.deep_gemm")
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

    sm70_ops = import_vllm_module("vllm._sm70_ops")
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
    padded = round_up(n, BLOCK)
    require_layer_hooks(layer, n, k)
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
        want = (cdiv(k, BLOCK), padded)
        assert tuple(layer.weight_scale_inv.shape) == want, (
            f"packed scales {tuple(layer.weight_scale_inv.shape)}, want {want}"
        )
    return method, layer, w, b, casts[0]


# What packed-repack's process_weights_after_loading sets on a layer it packs.
LAYER_HOOKS = (
    "sm70_fp8_turbomind",
    "fp8_true_n",
    "sm70_fp8_meta",
    "sm70_fp8_k_ld",
    "sm70_fp8_q_ld",
)


def require_layer_hooks(layer: Any, n: int, k: int) -> None:
    """A failure naming the first of :data:`LAYER_HOOKS` the processed layer lacks."""
    for hook in LAYER_HOOKS:
        if not hasattr(layer, hook):
            raise AssertionError(
                f"{HOOK_ABSENT}: the processed {n}x{k} layer has no {hook} (packed-repack "
                "sets it when it packs for the SM70 GEMM)"
            )


def _check_against_reference(
    ops: Ops, out: Any, w: Any, b: Any, x: Any, cast: tuple[Any, Any]
) -> tuple[float, int, float]:
    """``out`` (of a [n, k] layer on ``x``) against the float reference computed from
    the e4m3 weight and scales the layer itself quantized (``cast``, which may be a
    device's), after checking that cast against the CPU's: bit for bit with the exact
    stand-ins, each element within the tolerance of the reference's own rounding
    (:func:`kernel_tolerance`) otherwise. Returns the max abs error, how many e4m3 codes
    the layer's cast has other than the CPU's, and the worst error / tolerance."""
    import torch

    n, k = w.shape
    lead = tuple(x.shape[:-1])
    assert tuple(out.shape) == (*lead, n) and out.dtype == torch.float16, (
        f"output {out.dtype} {tuple(out.shape)}, want float16 {(*lead, n)}"
    )
    differing = _check_cast(w, cast)
    q, s = reference_cast(w, cast)
    x2 = x.reshape(-1, k).cpu()
    ref = dequant_reference(q[:n], s, x2).reshape(*lead, n)
    if b is not None:
        ref = ref + b.cpu()
    got = out.cpu()
    err = float((got.float() - ref.float()).abs().max())
    if ops.exact:
        assert torch.equal(got, ref), f"N={n} K={k}: not bit-exact against the reference ({err})"
        return err, differing, 0.0
    # fp32 accumulation in another order on the GPU: within the reference's own rounding.
    exact, tol = kernel_tolerance(x2, dequant_weight(q[:n], s), None if b is None else b.cpu())
    worst = assert_within_tolerance(
        got.reshape(-1, n), ref.reshape(-1, n), tol, exact, f"N={n} K={k}"
    )
    return err, differing, worst


def _input(ops: Ops, k: int, m: int) -> Any:
    import torch

    gen = torch.Generator().manual_seed(7 + k + m)
    return (torch.randn(2, m, k, generator=gen) * 0.5).to(torch.float16).to(ops.device)


def sm70_linear_check(ops: Ops, n: int, k: int, m: int, bias: bool) -> str:
    """A patched online fp8_per_block layer [n, k] on SM70: packed at load (rows
    padded to whole 128-row blocks, output_size_per_partition the packed width),
    one SM70 GEMM per call, sliced back to n, matching the reference."""
    sm70_ops = import_vllm_module("vllm._sm70_ops")
    gemm_calls: list[tuple[int, ...]] = []
    real_gemm = sm70_ops.fp8_gemm_sm70_out

    def gemm_spy(out: Any, *args: Any) -> None:
        gemm_calls.append(tuple(out.shape))
        real_gemm(out, *args)

    padded = round_up(n, BLOCK)
    with _sm70_online_fp8(ops) as f, patched(sm70_ops, "fp8_gemm_sm70_out", gemm_spy):
        method, layer, w, b, cast = _packed_layer(f, ops, n, k, bias)
        assert layer.output_size_per_partition == padded, (
            f"output_size_per_partition is {layer.output_size_per_partition}, want the "
            f"packed width {padded}: the fork's SM70 warmup sizes its GEMM output with it"
        )
        x = _input(ops, k, m)
        out = method.apply(layer, x, layer.bias)
    assert gemm_calls == [(2 * m, padded)], f"SM70 GEMM calls {gemm_calls}"
    err, differing, worst = _check_against_reference(ops, out, w, b, x, cast)
    within = "" if ops.exact else f", {worst:.2g} x its tolerance at worst"
    return (
        f"N={n} (packed {padded}) K={k}: max abs error {err:.3g}{within} vs the float "
        f"reference of the layer's own cast ({differing} e4m3 codes other than the CPU cast's)"
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

    warmup = import_vllm_module("vllm.model_executor.warmup.awq_sm70_warmup")
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
            ((m, round_up(n, BLOCK)), (k, round_up(n, BLOCK)))
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
