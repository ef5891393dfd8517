"""Checks of the patched 1Cat-vLLM tree (patches capability-floor,
odd-width-padding, eager-block-cast, packed-repack and cli-version).

This file runs *inside* a Python process whose sys.path starts with a patched
checkout of the fork (the tests start it as a subprocess), so it imports the
fork's `vllm` and torch freely. It never becomes part of the fork.

Every check takes an `ops` object:

- `ReferenceSm70Ops` registers float reference implementations of the fork's
  SM70 FP8 ops (`_C::fp8_sm70_prepare`, `_C::fp8_gemm_sm70_out`) with
  torch.library, so the patched code runs end to end on a CPU with the device
  capability mocked to 7.0 (what the fork's v1.3.0 test
  tests/quantization/test_sm70_fp8_prefill_exact_dense.py does with fakes).
- `RealSm70Ops` uses the compiled ops of an SM70 build on a real V100; the
  capability is then read from the device, not mocked.

The same check functions serve both, so the V100 smoke suite can call them
with `RealSm70Ops()`.

Command line: `python patched_checks.py {reference|real} CHECK [CHECK...]`;
prints one `PASS <check>` line per check and exits non-zero on the first
failure.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import torch

BLOCK = 128
# Qwen3.5's fused in_proj_qkvz per rank at TP4: (16,384 + 96) / 4.
ODD_WIDTH = 4120


# ---------------------------------------------------------------------------
# SM70 ops: float reference and real
# ---------------------------------------------------------------------------


def _ref_prepare(
    qweight: torch.Tensor, scales: torch.Tensor, group_size: int, gated: bool
) -> list[torch.Tensor]:
    """Float stand-in for fp8_sm70_prepare, with the same contract: e4m3
    [N, K] + fp32 block scales [ceil(N/128), ceil(K/128)] -> packed weight
    [K, N] (uint8), per-column fp16 group scales [ceil(K/128), N], meta."""
    assert not gated, "the reference covers the plain (non gated-SiLU) layout"
    assert qweight.dtype == torch.float8_e4m3fn and scales.dtype == torch.float32
    n, k = qweight.shape
    assert n % 8 == 0 and k % 8 == 0, "K and N must be multiples of 8"
    assert scales.shape == (-(-n // group_size), -(-k // group_size))
    tm_weight = qweight.t().contiguous().view(torch.uint8)
    # The real op casts the scales to fp16 too.
    tm_scales = scales.t().to(torch.float16).repeat_interleave(group_size, 1)[:, :n].contiguous()
    return [tm_weight, tm_scales, torch.tensor([n, n], dtype=torch.int64)]


def _ref_gemm_out(
    out: torch.Tensor,
    x: torch.Tensor,
    tm_weight: torch.Tensor,
    tm_scales: torch.Tensor,
    group_size: int,
    k_ld: int,
    q_ld: int,
    gated: bool,
) -> None:
    """Float stand-in for fp8_gemm_sm70_out: out = x @ dequant(weight)."""
    assert not gated
    k, n = tm_weight.shape
    assert x.shape[1] == k and out.shape == (x.shape[0], n)
    out.copy_((x.double() @ dequantize_packed(tm_weight, tm_scales, group_size)).to(out.dtype))


def dequantize_packed(
    tm_weight: torch.Tensor, tm_scales: torch.Tensor, group_size: int
) -> torch.Tensor:
    """[K, N] float64 weight from the reference packed layout."""
    k = tm_weight.shape[0]
    w = tm_weight.view(torch.float8_e4m3fn).double()
    return w * tm_scales.double().repeat_interleave(group_size, 0)[:k]


class ReferenceSm70Ops:
    """Registers float reference SM70 FP8 ops under torch.ops._C (CPU)."""

    name = "reference"
    device = "cpu"
    exact = True  # float64 accumulation: results must match bit for bit
    can_toggle = True  # install/uninstall to test the "op absent" branch

    def __init__(self) -> None:
        self._lib: Any = None

    def install(self) -> None:
        if self._lib is not None:
            return
        lib = torch.library.Library("_C", "FRAGMENT")
        lib.define(
            "fp8_sm70_prepare(Tensor qweight, Tensor scales, int group_size, "
            "bool interleave_gated_silu) -> Tensor[]"
        )
        lib.define(
            "fp8_gemm_sm70_out(Tensor(a!) out, Tensor input, Tensor qweight, "
            "Tensor scales, int group_size, int k_ld, int q_ld, bool gated_silu) -> ()"
        )
        lib.impl("fp8_sm70_prepare", _ref_prepare, "CompositeExplicitAutograd")
        lib.impl("fp8_gemm_sm70_out", _ref_gemm_out, "CompositeExplicitAutograd")
        self._lib = lib

    def uninstall(self) -> None:
        if self._lib is not None:
            self._lib._destroy()
            self._lib = None


class RealSm70Ops:
    """The compiled SM70 ops of the installed build, on a real 7.0 GPU."""

    name = "real"
    device = "cuda"
    exact = False
    can_toggle = False

    def install(self) -> None:
        import vllm._sm70_ops  # noqa: F401  (loads vllm._C)

        if not hasattr(torch.ops._C, "fp8_sm70_prepare"):
            raise AssertionError("this build has no _C::fp8_sm70_prepare")

    def uninstall(self) -> None:
        pass


Ops = ReferenceSm70Ops | RealSm70Ops


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


@contextlib.contextmanager
def patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


@contextlib.contextmanager
def device_capability(ops: Ops, cap: tuple[int, int] | None) -> Iterator[None]:
    """Pretend to be a CUDA device of capability `cap` (reference ops only);
    with real ops the device's own capability is used and `cap` must match."""
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability

    if isinstance(ops, RealSm70Ops):
        real = current_platform.get_device_capability()
        assert cap is None or tuple(real) == cap, f"device is {real}, check wants {cap}"
        yield
        return
    assert cap is not None
    cls = type(current_platform)
    fake = DeviceCapability(*cap)
    with (
        patched(cls, "is_cuda", lambda self: True),
        patched(cls, "get_device_capability", classmethod(lambda c, device_id=0: fake)),
    ):
        yield


def _fake_vllm_config() -> Any:
    return SimpleNamespace(model_config=SimpleNamespace(dtype=torch.float16))


def _online_fp8() -> Any:
    import vllm.model_executor.layers.quantization.online.fp8 as online_fp8

    return online_fp8


def _reference_linear(weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """What an exact SM70 per-block FP8 linear must produce for `weight`:
    x @ dequant(block-cast weight).T, with the scales rounded to fp16 as the
    SM70 kernel stores them, accumulated in float64, rounded to x.dtype."""
    from vllm.utils.deep_gemm import _per_block_cast_to_fp8_eager

    q, s = _per_block_cast_to_fp8_eager(weight, [BLOCK, BLOCK], False)
    n, k = q.shape
    s_full = s.to(torch.float16).double().repeat_interleave(BLOCK, 0)[:n]
    s_full = s_full.repeat_interleave(BLOCK, 1)[:, :k]
    w = q.double() * s_full
    return (x.double() @ w.t()).to(x.dtype)


def _make_layer(method: Any, n: int, k: int, device: str, bias: bool) -> torch.nn.Module:
    """A linear layer as vLLM builds it (one tensor-parallel rank, no process
    group needed), its weight then filled with real data."""
    from vllm.model_executor import parameter

    layer = torch.nn.Module()
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
    w = (torch.randn(n, k, generator=gen) * 0.05).to(torch.float16).to(device)
    layer.register_parameter("weight", torch.nn.Parameter(w, requires_grad=False))
    layer.bias = None
    if bias:
        b = (torch.randn(n, generator=gen) * 0.1).to(torch.float16).to(device)
        layer.bias = torch.nn.Parameter(b, requires_grad=False)
    return layer


# ---------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------


def check_capability_floor(ops: Ops) -> None:
    """OnlineQuantizationConfig.get_min_capability: 70 only on (7, 0) with the
    SM70 FP8 op present; 75 on 7.0 without it; 75 on 7.5 and later."""
    from vllm.model_executor.layers.quantization.online.base import (
        OnlineQuantizationConfig,
    )

    floor = OnlineQuantizationConfig.get_min_capability
    ops.install()
    with device_capability(ops, (7, 0)):
        assert floor() == 70, floor()
    if not ops.can_toggle:
        return
    for cap in [(7, 5), (8, 0), (8, 9), (9, 0), (12, 0)]:
        with device_capability(ops, cap):
            assert floor() == 75, (cap, floor())
    ops.uninstall()
    try:
        with device_capability(ops, (7, 0)):
            assert floor() == 75, ("7.0 without the op", floor())
    finally:
        ops.install()


def check_padding_helpers(ops: Ops) -> None:
    """pad_fp8_rows_to_block pads with +0.0 rows to a 128 multiple (identity
    for multiples) and slice_to_true_width drops exactly the padded columns."""
    f = _online_fp8()
    q = (torch.randn(ODD_WIDTH, 256) * 10).to(torch.float8_e4m3fn).to(ops.device)
    p = f.pad_fp8_rows_to_block(q, BLOCK)
    assert p.dtype == q.dtype and p.shape == (4224, 256), p.shape
    assert torch.equal(p[:ODD_WIDTH].view(torch.uint8), q.view(torch.uint8))
    assert not p[ODD_WIDTH:].view(torch.uint8).any()
    q128 = q[:4096]
    assert f.pad_fp8_rows_to_block(q128, BLOCK) is q128
    out = torch.randn(3, 2, 4224, device=ops.device)
    s = f.slice_to_true_width(out, ODD_WIDTH)
    assert s.shape == (3, 2, ODD_WIDTH) and s.is_contiguous()
    assert torch.equal(s, out[..., :ODD_WIDTH])
    assert f.slice_to_true_width(s, ODD_WIDTH) is s


def check_eager_block_cast(ops: Ops) -> None:
    """On SM70 per_block_cast_to_fp8 runs the eager function, never the
    torch.compile wrapper (Triton has no fp8e4nv on Volta); elsewhere the
    compiled wrapper is still used."""
    import vllm.utils.deep_gemm as dg

    compiled_calls: list[int] = []
    real_compiled = dg._per_block_cast_to_fp8_compiled

    def spy(*args: Any, **kwargs: Any) -> Any:
        compiled_calls.append(1)
        assert not isinstance(ops, RealSm70Ops), "compiled block cast called on SM70"
        return dg._per_block_cast_to_fp8_eager(*args, **kwargs)

    assert dg._per_block_cast_to_fp8_eager is not real_compiled
    x = torch.randn(300, 200, dtype=torch.float16, device=ops.device)
    with patched(dg, "_per_block_cast_to_fp8_compiled", spy):
        with device_capability(ops, (7, 0)):
            q, s = dg.per_block_cast_to_fp8(x, [BLOCK, BLOCK], use_ue8m0=False)
        assert compiled_calls == [], "SM70 went through the compiled wrapper"
        assert q.shape == (300, 200) and q.dtype == torch.float8_e4m3fn
        assert s.shape == (3, 2) and s.dtype == torch.float32
        q_ref, s_ref = dg._per_block_cast_to_fp8_eager(x, [BLOCK, BLOCK], False)
        assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8))
        assert torch.equal(s, s_ref)
        if ops.can_toggle:
            with device_capability(ops, (9, 0)):
                dg.per_block_cast_to_fp8(x, [BLOCK, BLOCK], use_ue8m0=False)
            assert compiled_calls == [1], "non-SM70 no longer uses the compiled cast"


def _run_sm70_linear(ops: Ops, n: int, k: int, m: int, bias: bool) -> None:
    f = _online_fp8()
    import vllm._sm70_ops as sm70_ops

    ops.install()
    gemm_calls: list[tuple[int, ...]] = []
    real_gemm = sm70_ops.fp8_gemm_sm70_out

    def gemm_spy(out: torch.Tensor, *args: Any) -> None:
        gemm_calls.append(tuple(out.shape))
        real_gemm(out, *args)

    def no_generic_kernel(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("generic FP8 kernel initialised on SM70")

    with (
        device_capability(ops, (7, 0)),
        patched(f, "get_current_vllm_config", _fake_vllm_config),
        patched(f, "init_fp8_linear_kernel", no_generic_kernel),
        patched(sm70_ops, "fp8_gemm_sm70_out", gemm_spy),
    ):
        method = f.Fp8PerBlockOnlineLinearMethod()
        assert method.use_sm70_fp8, "SM70 path not selected"
        layer = _make_layer(method, n, k, ops.device, bias)
        assert not hasattr(method, "fp8_linear")
        w = layer.weight.data.clone()
        b = None if layer.bias is None else layer.bias.data.clone()
        method.process_weights_after_loading(layer)

        padded = -(-n // BLOCK) * BLOCK
        assert layer.sm70_fp8_turbomind and layer.fp8_true_n == n
        assert layer.weight.dtype == torch.uint8 and tuple(layer.weight.shape) == (k, padded)
        assert tuple(layer.weight_scale_inv.shape) == (-(-k // BLOCK), padded)
        assert layer.output_size_per_partition == n

        gen = torch.Generator().manual_seed(7)
        x = (torch.randn(2, m, k, generator=gen) * 0.5).to(torch.float16).to(ops.device)
        out = method.apply(layer, x, layer.bias)
    assert gemm_calls == [(2 * m, padded)], gemm_calls
    assert out.shape == (2, m, n) and out.dtype == torch.float16, out.shape

    ref = _reference_linear(w, x.reshape(-1, k)).reshape(2, m, n)
    if b is not None:
        ref = ref + b
    if ops.exact and b is None:
        assert torch.equal(out, ref), (out - ref).abs().max()
    else:
        # fp16 accumulation on the GPU, and (with a bias) one more fp16 add.
        torch.testing.assert_close(out.float(), ref.float(), rtol=2e-2, atol=2e-2)


def check_sm70_linear_odd_width(ops: Ops) -> None:
    """A 4,120-row per-block FP8 linear on the SM70 path: weights padded to
    4,224 rows and packed, apply() dispatches to fp8_gemm_sm70_out and slices
    back to 4,120 columns equal to the float reference."""
    _run_sm70_linear(ops, ODD_WIDTH, 256, 3, bias=False)


def check_sm70_linear_block_width(ops: Ops) -> None:
    """The same for a 128-multiple width (no padding), with a bias."""
    _run_sm70_linear(ops, 512, 384, 5, bias=False)
    _run_sm70_linear(ops, 512, 384, 5, bias=True)


def check_sm70_linear_odd_width_bias(ops: Ops) -> None:
    """An odd-width layer with a bias: bias added after slicing."""
    _run_sm70_linear(ops, 264, 128, 4, bias=True)


def check_cli_version(ops: Ops) -> None:
    """`vllm --version` prints vllm.version.__version__ and run-batch reads it
    too, while importlib.metadata knows no `vllm` distribution (the wheel
    installs as 1cat-vllm). Run it in a fresh process: with reference ops
    it also stands in the `1cat-vllm` metadata (with the `+cpu` suffix a CPU
    build carries) before vllm detects its platform."""
    import importlib.metadata

    real_version = importlib.metadata.version
    fake_dist: dict[str, str] = {}
    if isinstance(ops, ReferenceSm70Ops):
        import vllm.version

        fake_dist["1cat-vllm"] = f"{vllm.version.__version__}+cpu"

    def no_vllm_dist(name: str) -> str:
        if name == "vllm":
            raise importlib.metadata.PackageNotFoundError(name)
        if name in fake_dist:
            return fake_dist[name]
        return real_version(name)

    out = _Capture()
    with (
        patched(importlib.metadata, "version", no_vllm_dist),
        patched(sys, "argv", ["vllm", "--version"]),
        contextlib.redirect_stdout(out),  # type: ignore[type-var]
    ):
        import inspect

        import vllm.entrypoints.cli.main as cli_main
        from vllm.entrypoints.cli import run_batch
        from vllm.version import __version__

        for mod in (cli_main, run_batch):
            assert 'metadata.version("vllm")' not in inspect.getsource(mod), mod
            assert mod.VLLM_VERSION == __version__, mod
        try:
            cli_main.main()
        except SystemExit as e:
            assert e.code in (0, None), e.code
    assert out.text.strip() == __version__, out.text


class _Capture:
    def __init__(self) -> None:
        self.text = ""

    def write(self, s: str) -> int:
        self.text += s
        return len(s)

    def flush(self) -> None:
        pass


CHECKS: dict[str, Callable[[Ops], None]] = {
    "capability-floor": check_capability_floor,
    "padding-helpers": check_padding_helpers,
    "eager-block-cast": check_eager_block_cast,
    "sm70-linear-odd-width": check_sm70_linear_odd_width,
    "sm70-linear-block-width": check_sm70_linear_block_width,
    "sm70-linear-odd-width-bias": check_sm70_linear_odd_width_bias,
    "cli-version": check_cli_version,
}


# Checks that must start from a fresh interpreter (platform detection).
SEPARATE_PROCESS = {"cli-version"}


def main(argv: list[str]) -> int:
    kind, *names = argv
    ops: Ops = ReferenceSm70Ops() if kind == "reference" else RealSm70Ops()
    # Register the ops before vllm._sm70_ops is imported, as a build would.
    ops.install()
    for name in names or [c for c in CHECKS if c not in SEPARATE_PROCESS]:
        CHECKS[name](ops)
        print(f"PASS {name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
