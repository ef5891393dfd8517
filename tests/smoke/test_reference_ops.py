"""The CPU stand-ins for the fork's SM70 FP8 ops (incheck.ReferenceSm70Ops) are as
strict as the compiled ops: every TORCH_CHECK of fp8_sm70_prepare / fp8_gemm_sm70_out
(csrc/sm70_turbomind/ops/awq_sm70_gemm.cu) refuses the same calls with the same
message, the rules the kernels rely on unchecked are refused too, the meta and the
packed layout are opaque, and dequantization rounds like the kernel.

Needs torch (a CPU build is enough); not the fork.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from forkpatch.smoke import incheck  # noqa: E402

G = 128


@pytest.fixture
def ops() -> Iterator[Any]:
    if hasattr(torch.ops._C, "fp8_sm70_prepare"):
        pytest.skip("a compiled _C library with the SM70 ops is loaded in this process")
    stand_ins = incheck.ReferenceSm70Ops()
    stand_ins.install()
    yield torch.ops._C
    stand_ins.uninstall()


def _weight(n: int, k: int, seed: int = 0) -> tuple[Any, Any]:
    """An e4m3 weight [n, k] and fp32 block scales [ceil(n/128), ceil(k/128)]."""
    gen = torch.Generator().manual_seed(seed)
    q = (torch.randn(n, k, generator=gen) * 100).to(torch.float8_e4m3fn)
    s = torch.rand(-(-n // G), -(-k // G), generator=gen) * 1e-3 + 1e-4
    return q, s


def _dequant(q: Any, s: Any) -> Any:
    """The weight [k, n] as the kernel computes with it (fp16 scale, fp16 product)."""
    n, k = q.shape
    s16 = s.to(torch.float16).repeat_interleave(G, 0)[:n].repeat_interleave(G, 1)[:, :k]
    return (q.to(torch.float16).float() * s16.float()).to(torch.float16).t()


def _raises(fn: Callable[[], Any], message: str) -> None:
    with pytest.raises(RuntimeError) as exc:
        fn()
    assert message in str(exc.value)


def test_install_registers_every_op_the_series_and_the_forks_warmup_use():
    if hasattr(torch.ops._C, "fp8_sm70_prepare"):
        pytest.skip("a compiled _C library with the SM70 ops is loaded in this process")
    names = ("fp8_sm70_prepare", "fp8_gemm_sm70_out", "fp8_gemm_sm70_out_auto")
    names += incheck.SM70_WARMUP_GATES
    stand_ins = incheck.ReferenceSm70Ops()
    stand_ins.install()
    try:
        assert all(hasattr(torch.ops._C, name) for name in names)
    finally:
        stand_ins.uninstall()
    assert not any(hasattr(torch.ops._C, name) for name in names)


def test_prepare_returns_the_kernels_shapes_and_a_cpu_meta(ops):
    q, s = _weight(256, 384)
    w, scales, meta = ops.fp8_sm70_prepare(q, s, G, False)
    assert (w.dtype, tuple(w.shape)) == (torch.uint8, (384, 256))
    assert (scales.dtype, tuple(scales.shape)) == (torch.float16, (3, 256))
    assert (meta.dtype, tuple(meta.shape), meta.device.type) == (torch.int64, (2,), "cpu")
    assert int(meta[0]) != int(meta[1])


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda q, s: (q.to(torch.float16), s), "qweight must be float8_e4m3fn."),
        (lambda q, s: (q, s.to(torch.float16)), "scales must be float32."),
        (lambda q, s: (q.reshape(-1), s), "qweight must be 2D."),
        (lambda q, s: (q, s.reshape(-1)), "scales must be 2D."),
        (lambda q, s: (q[:, :260], s), "K and N must be multiples of 8."),
        (lambda q, s: (q[:252], s), "K and N must be multiples of 8."),
        (lambda q, s: (q, s[:1]), "output scale block mismatch."),
        (lambda q, s: (q, s[:, :2]), "input scale block mismatch."),
        # 4,120 = 8 x 515 passes the op's own check; its 32-row packs do not fit.
        (lambda q, s: _weight(264, 384), "N=264 is not a multiple of 32"),
    ],
)
def test_prepare_refuses_what_the_kernel_refuses(ops, make, message):
    q, s = _weight(256, 384)
    q, s = make(q, s)
    _raises(lambda: ops.fp8_sm70_prepare(q, s, G, False), message)


def test_prepare_refuses_other_group_sizes_and_the_gated_layout(ops):
    q, s = _weight(256, 384)
    _raises(lambda: ops.fp8_sm70_prepare(q, s, 64, False), "only group_size=128 is supported.")
    with pytest.raises(NotImplementedError):
        ops.fp8_sm70_prepare(q, s, G, True)


def _packed(ops: Any, n: int = 256, k: int = 384) -> tuple[Any, Any, Any, Any, Any]:
    q, s = _weight(n, k)
    w, scales, meta = ops.fp8_sm70_prepare(q, s, G, False)
    return q, s, w, scales, meta


def _x(m: int, k: int) -> Any:
    return (torch.randn(m, k, generator=torch.Generator().manual_seed(3)) * 0.5).half()


def test_gemm_computes_x_times_the_kernels_dequantized_weight(ops):
    q, s, w, scales, meta = _packed(ops)
    x = _x(5, 384)
    out = torch.empty(5, 256, dtype=torch.float16)
    ops.fp8_gemm_sm70_out(out, x, w, scales, G, int(meta[0]), int(meta[1]), False)
    want = (x.double() @ _dequant(q, s).contiguous().double()).half()
    assert torch.equal(out, want)
    # The _meta and _auto variants compute the same.
    for call in (
        lambda o: ops.fp8_gemm_sm70_out_meta(o, x, w, scales, meta, False),
        lambda o: ops.fp8_gemm_sm70_out_auto(o, x, w, scales),
    ):
        other = torch.empty_like(out)
        call(other)
        assert torch.equal(other, out)


def test_gemm_writes_through_a_row_strided_output(ops):
    _q, _s, w, scales, meta = _packed(ops)
    x = _x(3, 384)
    buf = torch.zeros(3, 300, dtype=torch.float16)
    out = buf[:, :256]  # stride(1) == 1, stride(0) == 300: the kernel takes it
    ops.fp8_gemm_sm70_out(out, x, w, scales, G, int(meta[0]), int(meta[1]), False)
    dense = torch.empty(3, 256, dtype=torch.float16)
    ops.fp8_gemm_sm70_out(dense, x, w, scales, G, int(meta[0]), int(meta[1]), False)
    assert torch.equal(out, dense) and not buf[:, 256:].any()


def _gemm_cases() -> list[tuple[str, Callable[..., tuple[Any, ...]], str]]:
    """(id, a change to the arguments, the message the call must fail with)."""

    def args(out: Any, x: Any, w: Any, s: Any, k_ld: int, q_ld: int) -> tuple[Any, ...]:
        return out, x, w, s, G, k_ld, q_ld, False

    return [
        (
            "input-fp32",
            lambda o, x, w, s, kl, ql: args(o, x.float(), w, s, kl, ql),
            "input must be float16.",
        ),
        (
            "weight-int8",
            lambda o, x, w, s, kl, ql: args(o, x, w.view(torch.int8), s, kl, ql),
            "weight must be uint8.",
        ),
        (
            "scales-fp32",
            lambda o, x, w, s, kl, ql: args(o, x, w, s.float(), kl, ql),
            "scales must be float16.",
        ),
        (
            "output-fp32",
            lambda o, x, w, s, kl, ql: args(o.float(), x, w, s, kl, ql),
            "output must be float16.",
        ),
        (
            "wrong-k",
            lambda o, x, w, s, kl, ql: args(o, x[:, :256], w, s, kl, ql),
            "weight shape mismatch.",
        ),
        (
            "scale-groups",
            lambda o, x, w, s, kl, ql: args(o, x, w, s[:2], kl, ql),
            "scale groups mismatch.",
        ),
        (
            "scale-cols",
            lambda o, x, w, s, kl, ql: args(o, x, w, s[:, :128].contiguous(), kl, ql),
            "scale shape mismatch.",
        ),
        (
            "output-rows",
            lambda o, x, w, s, kl, ql: args(o[:4], x, w, s, kl, ql),
            "output rows must match input rows.",
        ),
        (
            "output-column-stride",
            lambda o, x, w, s, kl, ql: args(
                torch.empty(5, 512, dtype=torch.float16)[:, ::2], x, w, s, kl, ql
            ),
            "output must be row-major contiguous.",
        ),
        # The warmup crash of issue 17: `out` sized by a true width, the weight padded.
        (
            "output-true-width",
            lambda o, x, w, s, kl, ql: args(o[:, :248], x, w, s, kl, ql),
            "output cols must match weight output dim.",
        ),
        (
            "swapped-lds",
            lambda o, x, w, s, kl, ql: args(o, x, w, s, ql, kl),
            "is not the meta fp8_sm70_prepare returned",
        ),
        (
            "made-up-lds",
            lambda o, x, w, s, kl, ql: args(o, x, w, s, 384, 256),
            "is not the meta fp8_sm70_prepare returned",
        ),
        (
            "input-column-stride",
            lambda o, x, w, s, kl, ql: args(
                o, torch.empty(5, 768, dtype=torch.float16)[:, ::2], w, s, kl, ql
            ),
            "input has column stride 2",
        ),
        (
            "input-3d",
            lambda o, x, w, s, kl, ql: args(o, x.reshape(5, 1, 384), w, s, kl, ql),
            "must be 2D",
        ),
    ]


@pytest.mark.parametrize(
    ("change", "message"), [c[1:] for c in _gemm_cases()], ids=[c[0] for c in _gemm_cases()]
)
def test_gemm_refuses_what_the_kernel_refuses(ops, change, message):
    _q, _s, w, scales, meta = _packed(ops)
    out = torch.empty(5, 256, dtype=torch.float16)
    call = change(out, _x(5, 384), w, scales, int(meta[0]), int(meta[1]))
    _raises(lambda: ops.fp8_gemm_sm70_out(*call), message)


def test_gemm_refuses_another_layers_meta(ops):
    _q, _s, w, scales, _meta = _packed(ops, 256, 384)
    *_, other_meta = _packed(ops, 512, 384)
    out = torch.empty(2, 256, dtype=torch.float16)
    _raises(
        lambda: ops.fp8_gemm_sm70_out_meta(out, _x(2, 384), w, scales, other_meta, False),
        "is not the meta fp8_sm70_prepare returned",
    )


def test_gemm_refuses_a_group_size_other_than_128_and_a_k_no_kernel_takes(ops):
    _q, _s, w, scales, meta = _packed(ops)
    out = torch.empty(2, 256, dtype=torch.float16)
    _raises(
        lambda: ops.fp8_gemm_sm70_out(
            out, _x(2, 384), w, scales, 64, int(meta[0]), int(meta[1]), False
        ),
        "only group_size=128 is supported.",
    )
    # K = 392 = 8 x 49: fp8_sm70_prepare takes it, no SM70 GEMM kernel (CTA_K >= 16) does
    # (the compiled op aborts the process there).
    _q, _s, w, scales, meta = _packed(ops, 256, 392)
    _raises(
        lambda: ops.fp8_gemm_sm70_out(
            out, _x(2, 392), w, scales, G, int(meta[0]), int(meta[1]), False
        ),
        "No feasible kernel found for the problem [stand-in: K=392",
    )


def test_gated_silu_checks_then_refuses(ops):
    _q, _s, w, scales, meta = _packed(ops)
    out = torch.empty(2, 256, dtype=torch.float16)
    _raises(
        lambda: ops.fp8_gemm_sm70_out(
            out, _x(2, 384), w, scales, G, int(meta[0]), int(meta[1]), True
        ),
        "gated_silu output cols must be n/2.",
    )
    with pytest.raises(NotImplementedError):
        ops.fp8_gemm_sm70_out(
            out[:, :128], _x(2, 384), w, scales, G, int(meta[0]), int(meta[1]), True
        )


def test_meta_variant_checks_the_meta_tensor(ops):
    _q, _s, w, scales, meta = _packed(ops)
    out = torch.empty(2, 256, dtype=torch.float16)
    x = _x(2, 384)
    _raises(
        lambda: ops.fp8_gemm_sm70_out_meta(out, x, w, scales, meta.int(), False),
        "meta must be int64.",
    )
    _raises(
        lambda: ops.fp8_gemm_sm70_out_meta(out, x, w, scales, meta[:1], False),
        "meta must have two values.",
    )


def test_the_awq_gate_is_registered_but_never_computes(ops):
    out = torch.empty(1, 8, dtype=torch.float16)
    _raises(
        lambda: ops.awq_gemm_sm70_out(out, out, out, out, G, 1, 1, False),
        "not covered by the stand-in ops",
    )


def test_reading_the_packed_weight_directly_gives_garbage(ops):
    """A caller that treats the packed weight as a plain [K, N] e4m3 matrix (or its
    scales as plain [K/128, N]) computes something else than the layer."""
    q, s, w, scales, _meta = _packed(ops)
    direct = w.view(torch.float8_e4m3fn).to(torch.float16).float()
    direct = direct * scales.float().repeat_interleave(G, 0)[: w.shape[0]]
    true = _dequant(q, s).float()
    assert not torch.allclose(direct, true, rtol=0.1, atol=1e-3)
    assert (direct - true).abs().max() > 0.1 * true.abs().max()


def test_dequantization_rounds_each_product_to_fp16_like_the_kernel(ops):
    """Block scales in fp16's subnormal range: the stand-in matches the kernel's
    fp16 products bit for bit, and differs from an exact (float64) dequantization."""
    n, k = 256, 256
    q = (torch.randn(n, k, generator=torch.Generator().manual_seed(5)) * 50).to(torch.float8_e4m3fn)
    s = torch.full((2, 2), 2.3e-7)  # an fp16 subnormal once converted
    w, scales, meta = ops.fp8_sm70_prepare(q, s, G, False)
    x = (torch.randn(4, k, generator=torch.Generator().manual_seed(6)) * 0.5).half()
    out = torch.empty(4, n, dtype=torch.float16)
    ops.fp8_gemm_sm70_out(out, x, w, scales, G, int(meta[0]), int(meta[1]), False)
    rounded = (x.double() @ _dequant(q, s).contiguous().double()).half()
    exact = (x.double() @ (q.double() * s.to(torch.float16).double()[0, 0]).t()).half()
    assert torch.equal(out, rounded)
    assert not torch.equal(out, exact)
