"""The gpu tier (any CUDA device) and the sm70 tier (a real capability 7.0 device:
the CUDA stack, the wheel's SM70 ops, a tiny model)."""

from __future__ import annotations

import re
import shutil
import tempfile
import time

from .layers import capability_floor_check, online_config, sm70_linear_check, sm70_warmup_check
from .registry import ODD_WIDTH, SM70, Ctx, NotRun, check, import_torch, import_vllm_module
from .sm70ops import RealSm70Ops

# --------------------------------------------------------------------------- gpu tier


@check("gpu.cuda-compute", baseline=True)
def cuda_compute(ctx: Ctx) -> str:
    """Every visible CUDA device answers a real computation: a 1024x1024 matmul
    matches the CPU result (a GPU can be "up" and not ready)."""
    torch = import_torch()
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


def driver_cuda() -> int:
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

    torch = import_torch()
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
    driver = driver_cuda()
    shown = f"{driver // 1000}.{driver % 1000 // 10}"
    assert driver >= _cuda_number(cuda), (
        f"the driver supports CUDA {shown}, the wheel's torch {have} needs CUDA {cuda}"
    )
    return f"torch {have} (pinned {pins[0]}), CUDA {cuda}, driver supports CUDA {shown}"


@check("sm70.capability", baseline=True)
def sm70_capability(ctx: Ctx) -> str:
    """torch and vllm's platform both read compute capability (7, 0)."""
    torch = import_torch()
    caps = [tuple(torch.cuda.get_device_capability(i)) for i in range(torch.cuda.device_count())]
    assert caps and all(c == SM70 for c in caps), f"torch reads capabilities {caps}"
    platforms = import_vllm_module("vllm.platforms")
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
    qmod = import_vllm_module("vllm.model_executor.layers.quantization")
    methods = getattr(qmod, "QUANTIZATION_METHODS", None)
    if methods is not None:
        assert "fp8_per_block" in methods, "fp8_per_block is not a known quantization method"
    config = online_config("fp8_per_block")
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
    torch = import_torch()
    try:
        from transformers import Qwen2Config, Qwen2ForCausalLM
    except ImportError as exc:
        raise NotRun(f"transformers is not importable ({exc}); it makes the tiny model") from None
    llm_mod = import_vllm_module("vllm")
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
