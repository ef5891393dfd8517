"""The gpu-jit tier's ops: the fork's SM70 FP8 kernels built as compute_70 PTX
(:func:`load_ptx_library`) and registered in place of the fork's _C ops
(:class:`PtxSm70Ops`)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from .registry import NotRun
from .sm70ops import (
    SM70_GROUP,
    SM70_OPS,
    awq_gemm_sm70_out_gate,
    gemm_type_checks,
    prepare_checks,
    uninstall_reference_ops,
)

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

        uninstall_reference_ops()  # the static tier's CPU stand-ins, same process
        present = [op for op, _, _ in SM70_OPS if hasattr(torch.ops._C, op)]
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
            "awq_gemm_sm70_out": awq_gemm_sm70_out_gate,
        }
        define = torch.library.Library("_C", "FRAGMENT")
        for op, schema, _ in SM70_OPS:
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

        n, k = prepare_checks(qweight, scales, group_size, lambda t: bool(t.is_cuda))
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

        gemm_type_checks(out, x, weight, scales, lambda t: bool(t.is_cuda))
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
