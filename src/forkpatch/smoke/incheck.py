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
twin passes :class:`ReferenceSm70Ops` (float reference ops registered with
torch.library, capability mocked to 7.0), the SM70 check :class:`RealSm70Ops`
(the wheel's compiled ops on a real 7.0 device). That is how CI exercises the
patch set's logic without a V100.

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

TIERS = ("static", "gpu", "sm70")

# Outcomes. "not-run" is never a pass: it always carries the reason.
PASSED, FAILED, NOT_RUN, ERROR = "passed", "failed", "not-run", "error"


class NotRun(Exception):
    """The check cannot run in this environment (the reason is the message)."""


@dataclass(frozen=True)
class CheckDef:
    id: str
    tier: str
    func: Callable[[Ctx], str | None]
    needs: tuple[str, ...] = ()  # "torch", "cuda", "sm70"
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
    if tier in ("gpu", "sm70") and "cuda" not in needs:
        needs = (*needs, "cuda")
    if tier == "sm70" and "sm70" not in needs:
        needs = (*needs, "sm70")

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
_DISTRIBUTIONS = {
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


def missing_module_reason(module: str) -> str:
    """Why a check cannot run without ``module``, and the command that installs it."""
    top = module.split(".")[0]
    dist = _DISTRIBUTIONS.get(top, top)
    deps = _deps_mode()
    python = _SPEC.get("base_python") or "python3"
    install = f"`{python} -m pip install {dist}`"
    if deps == "none":
        how = (
            f"--deps none installs nothing but the wheels: use --deps system with a python "
            f"that has it ({install}), or --deps index"
        )
    elif deps == "index":
        how = f"the index did not install it; {install} and use --deps system"
    else:
        how = f"install it for the python the smoke environment is made from: {install}"
    return f"needs the module '{top}', which is not installed in the smoke environment; {how}"


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


def _deps_mode() -> str:
    return str(_SPEC.get("deps", "?"))


# --------------------------------------------------------------------------- SM70 ops


def _ref_prepare(qweight: Any, scales: Any, group_size: int, gated: bool) -> list[Any]:
    """Float stand-in for fp8_sm70_prepare with the same contract: e4m3 [N, K] +
    fp32 block scales [ceil(N/128), ceil(K/128)] -> packed weight [K, N] (uint8),
    per-column fp16 group scales [ceil(K/128), N], meta."""
    import torch

    assert not gated, "the reference covers the plain (non gated-SiLU) layout"
    assert qweight.dtype == torch.float8_e4m3fn and scales.dtype == torch.float32
    n, k = qweight.shape
    assert n % 8 == 0 and k % 8 == 0, "K and N must be multiples of 8"
    assert tuple(scales.shape) == (-(-n // group_size), -(-k // group_size))
    tm_weight = qweight.t().contiguous().view(torch.uint8)
    tm_scales = scales.t().to(torch.float16).repeat_interleave(group_size, 1)[:, :n].contiguous()
    return [tm_weight, tm_scales, torch.tensor([n, n], dtype=torch.int64)]


def _ref_gemm_out(
    out: Any,
    x: Any,
    tm_weight: Any,
    tm_scales: Any,
    group_size: int,
    k_ld: int,
    q_ld: int,
    gated: bool,
) -> None:
    """Float stand-in for fp8_gemm_sm70_out: out = x @ dequant(weight)."""
    import torch

    assert not gated
    k, n = tm_weight.shape
    assert x.shape[1] == k and tuple(out.shape) == (x.shape[0], n)
    w = tm_weight.view(torch.float8_e4m3fn).double()
    w = w * tm_scales.double().repeat_interleave(group_size, 0)[:k]
    out.copy_((x.double() @ w).to(out.dtype))


class ReferenceSm70Ops:
    """Float reference SM70 FP8 ops under torch.ops._C, on the CPU."""

    name = "reference"
    device = "cpu"
    exact = True  # float64 accumulation: results must match bit for bit
    can_toggle = True  # install/uninstall to test the "op absent" branch

    def __init__(self) -> None:
        self._lib: Any = None

    def install(self) -> None:
        if self._lib is not None:
            return
        import torch

        if hasattr(torch.ops._C, "fp8_sm70_prepare"):
            # The wheel's compiled library is loaded and defines the ops (for
            # CUDA): add CPU kernels to them instead of defining them again.
            lib = torch.library.Library("_C", "IMPL")
            lib.impl("fp8_sm70_prepare", _ref_prepare, "CPU")
            lib.impl("fp8_gemm_sm70_out", _ref_gemm_out, "CPU")
            self.can_toggle = False
        else:
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
        if self._lib is not None and self.can_toggle:
            self._lib._destroy()
            self._lib = None


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


Ops = Any  # ReferenceSm70Ops | RealSm70Ops (kept loose: this file runs on 3.8+)

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


def _online_fp8() -> Any:
    return _import_vllm_module("vllm.model_executor.layers.quantization.online.fp8")


def _reference_linear(weight: Any, x: Any) -> Any:
    """x @ dequant(block-cast weight).T with fp16-rounded scales, in float64."""
    import torch
    from vllm.utils.deep_gemm import _per_block_cast_to_fp8_eager

    q, s = _per_block_cast_to_fp8_eager(weight, [BLOCK, BLOCK], False)
    n, k = q.shape
    s_full = s.to(torch.float16).double().repeat_interleave(BLOCK, 0)[:n]
    s_full = s_full.repeat_interleave(BLOCK, 1)[:, :k]
    w = q.double() * s_full
    return (x.double() @ w.t()).to(x.dtype)


def _make_layer(method: Any, n: int, k: int, device: str, bias: bool) -> Any:
    import torch
    from vllm.model_executor import parameter

    layer: Any = torch.nn.Module()
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


def _capability_floor(ops: Ops) -> str:
    base = _import_vllm_module("vllm.model_executor.layers.quantization.online.base")
    floor = base.OnlineQuantizationConfig.get_min_capability
    ops.install()
    with device_capability(ops, SM70):
        assert floor() == 70, f"get_min_capability() on (7, 0) with the SM70 op is {floor()}"
    if not ops.can_toggle:
        return "floor 70 on (7, 0)"
    for cap in [(7, 5), (8, 0), (8, 9), (9, 0), (12, 0)]:
        with device_capability(ops, cap):
            assert floor() == 75, f"get_min_capability() on {cap} is {floor()}, want 75"
    ops.uninstall()
    try:
        with device_capability(ops, SM70):
            assert floor() == 75, f"get_min_capability() on (7, 0) without the op is {floor()}"
    finally:
        ops.install()
    return "floor 70 on (7, 0) with the op, 75 without it and on 7.5+"


def _padding_helpers(ops: Ops) -> str:
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


def _eager_block_cast(ops: Ops) -> str:
    import torch

    dg = _import_vllm_module("vllm.utils.deep_gemm")
    compiled_calls: list[int] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        compiled_calls.append(1)
        if isinstance(ops, RealSm70Ops):
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


def _sm70_linear(ops: Ops, n: int, k: int, m: int, bias: bool) -> str:
    import torch

    f = _online_fp8()
    sm70_ops = _import_vllm_module("vllm._sm70_ops")
    ops.install()
    gemm_calls: list[tuple[int, ...]] = []
    real_gemm = sm70_ops.fp8_gemm_sm70_out

    def gemm_spy(out: Any, *args: Any) -> None:
        gemm_calls.append(tuple(out.shape))
        real_gemm(out, *args)

    def no_generic_kernel(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("generic FP8 kernel initialised on SM70")

    def fake_config() -> Any:
        from types import SimpleNamespace

        return SimpleNamespace(model_config=SimpleNamespace(dtype=torch.float16))

    with (
        device_capability(ops, SM70),
        patched(f, "get_current_vllm_config", fake_config),
        patched(f, "init_fp8_linear_kernel", no_generic_kernel),
        patched(sm70_ops, "fp8_gemm_sm70_out", gemm_spy),
    ):
        method = f.Fp8PerBlockOnlineLinearMethod()
        assert method.use_sm70_fp8, "SM70 path not selected"
        layer = _make_layer(method, n, k, ops.device, bias)
        assert not hasattr(method, "fp8_linear"), "a generic FP8 kernel was set up on SM70"
        w = layer.weight.data.clone()
        b = None if layer.bias is None else layer.bias.data.clone()
        method.process_weights_after_loading(layer)
        padded = -(-n // BLOCK) * BLOCK
        assert layer.sm70_fp8_turbomind and layer.fp8_true_n == n
        assert layer.weight.dtype == torch.uint8 and tuple(layer.weight.shape) == (k, padded), (
            f"packed weight {layer.weight.dtype} {tuple(layer.weight.shape)}, want uint8 {(k, padded)}"
        )
        assert layer.output_size_per_partition == n, (
            f"output_size_per_partition is {layer.output_size_per_partition}, want the true {n}"
        )
        if isinstance(ops, ReferenceSm70Ops):  # the compiled op's scale layout is its own
            want = (-(-k // BLOCK), padded)
            assert tuple(layer.weight_scale_inv.shape) == want, (
                f"packed scales {tuple(layer.weight_scale_inv.shape)}, want {want}"
            )
        gen = torch.Generator().manual_seed(7)
        x = (torch.randn(2, m, k, generator=gen) * 0.5).to(torch.float16).to(ops.device)
        out = method.apply(layer, x, layer.bias)
    assert gemm_calls == [(2 * m, padded)], f"SM70 GEMM calls {gemm_calls}"
    assert tuple(out.shape) == (2, m, n) and out.dtype == torch.float16, tuple(out.shape)
    ref = _reference_linear(w.cpu(), x.reshape(-1, k).cpu()).reshape(2, m, n)
    if b is not None:
        ref = ref + b.cpu()
    got = out.cpu()
    err = float((got.float() - ref.float()).abs().max())
    if ops.exact and b is None:
        assert torch.equal(got, ref), f"not bit-exact against the float reference (max {err})"
    else:
        # fp16 accumulation on the GPU (and, with a bias, one more fp16 add).
        torch.testing.assert_close(got.float(), ref.float(), rtol=2e-2, atol=2e-2)
    return f"N={n} (padded {padded}) K={k}: max abs error {err:.3g} vs float reference"


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
    """capability-floor with float reference SM70 ops and a mocked (7, 0) device."""
    return _capability_floor(_reference_ops())


@check("static.odd-width-padding-cpu", needs=("torch",))
def odd_width_padding_cpu(ctx: Ctx) -> str:
    """odd-width-padding helpers on CPU: 4,120 rows padded to 4,224 and sliced back,
    plus an odd-width layer with a bias through the reference SM70 linear."""
    ops = _reference_ops()
    ops.install()
    first = _padding_helpers(ops)
    return first + "; " + _sm70_linear(ops, 264, 128, 4, bias=True)


@check("static.eager-block-cast-cpu", needs=("torch",))
def eager_block_cast_cpu(ctx: Ctx) -> str:
    """eager-block-cast: a mocked SM70 takes the eager cast, other devices the compiled one."""
    return _eager_block_cast(_reference_ops())


@check("static.packed-repack-cpu", needs=("torch",))
def packed_repack_cpu(ctx: Ctx) -> str:
    """packed-repack on CPU: the 4,120-row per-block FP8 linear is packed at load,
    dispatched to the (reference) SM70 GEMM and bit-exact against the float reference."""
    ops = _reference_ops()
    a = _sm70_linear(ops, ODD_WIDTH, 256, 3, bias=False)
    b = _sm70_linear(ops, 512, 384, 5, bias=True)
    return f"{a}; {b}"


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
    """The online fp8_per_block config is accepted on this (7, 0) device."""
    detail = _capability_floor(RealSm70Ops())
    qmod = _import_vllm_module("vllm.model_executor.layers.quantization")
    methods = getattr(qmod, "QUANTIZATION_METHODS", None)
    if methods is not None:
        assert "fp8_per_block" in methods, "fp8_per_block is not a known quantization method"
    getter = getattr(qmod, "get_quantization_config", None)
    if getter is not None:
        cls = getter("fp8_per_block")
        floor = cls.get_min_capability()
        assert floor <= 70, f"{cls.__name__}.get_min_capability() is {floor} on this device"
        detail += f"; {cls.__name__} loads (min capability {floor})"
    return detail


@check("sm70.odd-width-linear")
def sm70_odd_width_linear(ctx: Ctx) -> str:
    """A 4,120-row per-block FP8 linear through the real SM70 GEMM matches the float
    reference within FP8 tolerance."""
    return _sm70_linear(RealSm70Ops(), ODD_WIDTH, 256, 3, bias=False)


@check("sm70.tiny-model-generates")
def sm70_tiny_model_generates(ctx: Ctx) -> str:
    """A tiny Qwen2-shaped model, made here with random weights, loads with
    fp8_per_block and generates tokens."""
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
            intermediate_size=512,
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
    if needs & {"torch", "cuda", "sm70"} and device.get("torch") is None:
        return device.get("reason") or "torch is not importable"
    if needs & {"cuda", "sm70"} and not device.get("cuda_available"):
        return device.get("reason") or "no CUDA device"
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
