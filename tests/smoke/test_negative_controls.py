"""The gpu-jit checks' negative controls on the CPU: the stand-in ops computing as a GPU
kernel does (fp32 accumulation: the checks compare within their tolerance, not bit for
bit) pass the kernel matrix, and each wrong kernel the sceptic built for the GPU fails
it: the output scaled by 1.02 (and by 1.003), output columns 0-127 zeroed, the block
scales misplaced by one 128-column block, and a reference of the CPU's cast where the
kernel computed with a device's cast (the bug of the old reference). The same faults
through the PTX library's test-only switch are run on a GPU (docs/gpu-jit.md).

The tolerance is each element's own (from the reference's rounding: fp32 accumulation
over K plus one fp16 step of its magnitude), so a fault far below the old fixed 2e-2 is
many tolerances off. Needs torch (a CPU build); not the fork.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from forkpatch.smoke import incheck  # noqa: E402
from forkpatch.smoke.incheck import gpujit, layers  # noqa: E402


@pytest.fixture
def gpu_like() -> Iterator[Any]:
    if hasattr(torch.ops._C, "fp8_sm70_prepare"):
        pytest.skip("a compiled _C library with the SM70 ops is loaded in this process")
    made: list[Any] = []

    def make(fault: str = "") -> Any:
        ops = incheck.GpuLikeSm70Ops(fault)
        ops.install()
        made.append(ops)
        return ops

    yield make
    for ops in made:
        ops.uninstall()


def test_the_kernel_matrix_passes_a_kernel_that_rounds_as_a_gpu_does(gpu_like):
    detail = gpujit.kernel_matrix_check(gpu_like())
    assert "x its tolerance at worst" in detail


@pytest.mark.parametrize(
    ("fault", "columns"),
    [
        ("scale=1.02", None),
        ("scale=1.003", None),
        ("scale=0.98", None),
        ("zero-cols=0-127", "0-127"),
        ("zero-cols=200-200", "200"),
        ("misplaced-scales", None),
    ],
)
def test_each_wrong_kernel_fails_the_kernel_matrix(gpu_like, fault, columns):
    with pytest.raises(AssertionError, match="outside their tolerance") as exc:
        gpujit.kernel_matrix_check(gpu_like(fault))
    if columns is not None:
        assert f"column(s) {columns}" in str(exc.value), str(exc.value)


def _weight(n: int, k: int, seed: int) -> tuple[Any, Any]:
    gen = torch.Generator().manual_seed(seed)
    q = (torch.randn(n, k, generator=gen) * 100).clamp(-448, 448).to(torch.float8_e4m3fn)
    s = torch.rand(-(-n // 128), -(-k // 128), generator=gen) * 2e-3 + 1e-4
    return q, s


def _device_rounded(q: Any, stride: int) -> Any:
    """Every ``stride``-th e4m3 code one step toward zero: a device's cast that rounds a
    few codes the other way."""
    flat = q.view(torch.uint8).clone().view(-1)
    idx = torch.arange(0, flat.numel(), stride)
    mag = (flat[idx] & 0x7F).to(torch.int16)
    flat[idx] = (flat[idx] & 0x80) | torch.clamp(mag - 1, min=0).to(torch.uint8)
    return flat.view(q.shape).view(torch.float8_e4m3fn)


@pytest.mark.parametrize(("n", "k", "m", "stride"), [(4120, 256, 6, 997), (512, 384, 10, 499)])
def test_a_reference_of_the_cpus_cast_fails_where_the_kernel_used_the_devices(n, k, m, stride):
    """The bug the reference fix removed: the kernel computes with the device's cast (a
    code in ~1,000 one step off), the old reference recomputed the CPU's. Against the
    layer's own cast it passes; against the CPU's it fails."""
    q_cpu, s = _weight(n, k, n + k)
    q_dev = _device_rounded(q_cpu, stride)
    gen = torch.Generator().manual_seed(k)
    x = (torch.randn(m, k, generator=gen) * 0.5).to(torch.float16)
    w_dev = layers.dequant_weight(q_dev, s)
    got = (x.float() @ w_dev.float().t()).to(torch.float16)  # as an fp32-accumulating kernel
    exact, tol = incheck.kernel_tolerance(x, w_dev)
    incheck.assert_within_tolerance(got, exact.to(torch.float16), tol, exact, "device cast")
    exact_cpu, tol_cpu = incheck.kernel_tolerance(x, layers.dequant_weight(q_cpu, s))
    ref_cpu = exact_cpu.to(torch.float16)
    with pytest.raises(AssertionError, match="outside their tolerance"):
        incheck.assert_within_tolerance(got, ref_cpu, tol_cpu, exact_cpu, "CPU cast")


def test_inputs_that_leave_a_column_unseen_are_refused():
    """A check whose inputs give a column no output above its tolerance could not see
    that column wrong: the comparison says so instead of passing."""
    q, s = _weight(256, 128, 3)
    q[:128] = torch.zeros(128, 128).to(torch.float8_e4m3fn)
    x = torch.ones(2, 128, dtype=torch.float16)
    w = layers.dequant_weight(q, s)
    exact, tol = incheck.kernel_tolerance(x, w)
    got = exact.to(torch.float16)
    with pytest.raises(AssertionError, match=r"give 128 column\(s\) 0-127 no output above"):
        incheck.assert_within_tolerance(got, got, tol, exact, "zero rows")


@pytest.mark.parametrize(
    ("magnitude", "step"),
    [(1.0, 2.0**-10), (1.5, 2.0**-10), (4.0, 2.0**-8), (0.3, 2.0**-12), (1e-6, 2.0**-24)],
)
def test_the_fp16_step_is_the_spacing_at_the_magnitude(magnitude, step):
    assert float(layers.fp16_step(torch.tensor([magnitude], dtype=torch.float64))) == step
