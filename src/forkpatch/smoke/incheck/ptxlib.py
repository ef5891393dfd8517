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

# The C interface of the PTX library (forkpatch/data/sm70ptx/fp8_capi.cu).
PTX_SYMBOLS = (
    "fpsm70_prepare",
    "fpsm70_gemm",
    "fpsm70_capability",
    "fpsm70_last_error",
    "fpsm70_fault",
)
PTX_MANIFEST = "manifest.json"
# Bounds on what the loader reads: the manifest is a page of JSON, the library ~8 MB.
MANIFEST_MAX_BYTES = 1 << 20
LIBRARY_MAX_BYTES = 512 << 20
_SHA256_HEX = frozenset("0123456789abcdef")


class PtxLibraryError(RuntimeError):
    """The PTX library given to the gpu-jit tier cannot be used (the message says why)."""


def read_regular(path: str, limit: int, what: str) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes: opened without
    blocking (a FIFO neither blocks nor is read), checked as a regular file on the open
    descriptor (a link to a device is refused), read to ``limit`` + 1 bytes at most."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise PtxLibraryError(f"{what} {path}: cannot open it ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PtxLibraryError(f"{what} {path} is not a regular file: refused")
        if st.st_size > limit:
            raise PtxLibraryError(
                f"{what} {path} is {st.st_size} bytes, over the {limit} this loader reads"
            )
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise PtxLibraryError(f"{what} {path} grew past {limit} bytes while read: refused")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _verified_copy(data: bytes) -> str:
    """``data`` (the library's bytes, checked against its manifest) in a private file
    of this process, which is what is loaded: a change to the given file after the
    check cannot reach the process."""
    import atexit
    import shutil
    import tempfile

    where = tempfile.mkdtemp(prefix="forkpatch-ptxlib-")
    atexit.register(shutil.rmtree, where, True)
    path = os.path.join(where, "libforkpatch_sm70_fp8.so")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o500)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return path


def load_ptx_library(path: str) -> tuple[Any, dict[str, Any]]:
    """The PTX library at ``path`` (ctypes, argument types set) and its build manifest.

    Nothing of the library runs before its bytes are checked: the manifest beside it
    is read as a bounded regular file, the library likewise, its sha256 compared with
    the manifest's, and the checked bytes are what is loaded (a private copy)."""
    import ctypes
    import hashlib

    rebuild = "build it with ci/sm70-ptx-lib.sh (python -m forkpatch.smoke.ptxbuild)"
    if not os.path.isfile(path):
        raise PtxLibraryError(f"PTX library {path}: no such file; {rebuild}")
    manifest_path = os.path.join(os.path.dirname(path), PTX_MANIFEST)
    if not os.path.lexists(manifest_path):
        raise PtxLibraryError(
            f"PTX library {path}: no {PTX_MANIFEST} beside it (fork commit, compiler, "
            f"flags): not a forkpatch build; {rebuild}"
        )
    raw = read_regular(manifest_path, MANIFEST_MAX_BYTES, "the PTX library's manifest")
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise PtxLibraryError(f"PTX library {path}: {manifest_path} is not JSON ({exc})") from None
    if not isinstance(manifest, dict) or "fork_commit" not in manifest:
        raise PtxLibraryError(f"PTX library {path}: {manifest_path} has no fork_commit")
    want = manifest.get("sha256")
    if not isinstance(want, str) or len(want) != 64 or not set(want) <= _SHA256_HEX:
        raise PtxLibraryError(
            f"PTX library {path}: {manifest_path} has no sha256 of the library; {rebuild}"
        )
    data = read_regular(path, LIBRARY_MAX_BYTES, "PTX library")
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        raise PtxLibraryError(
            f"PTX library {path} has sha256 {got}, its {PTX_MANIFEST} says {want}: not the "
            f"library that manifest describes, so it is not loaded; {rebuild}"
        )
    try:
        lib = ctypes.CDLL(_verified_copy(data))
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
    lib.fpsm70_fault.restype = ctypes.c_char_p
    lib.fpsm70_fault.argtypes = []
    lib.fpsm70_capability.argtypes = [c_int, ctypes.POINTER(c_int), ctypes.POINTER(c_int)]
    lib.fpsm70_prepare.argtypes = [ptr, ptr, i64, i64, i64, ptr, ptr, ctypes.POINTER(i64)]
    lib.fpsm70_prepare.argtypes += [c_int, ptr]
    lib.fpsm70_gemm.argtypes = [ptr, i64, i64, i64, i64, ptr, i64, i64, i64, ptr, i64, i64]
    lib.fpsm70_gemm.argtypes += [ptr, i64, i64, i64, i64, i64, c_int, c_int, ptr]
    for fn in (lib.fpsm70_capability, lib.fpsm70_prepare, lib.fpsm70_gemm):
        fn.restype = c_int
    switch = bool(lib.fpsm70_fault())
    if switch != bool(manifest.get("fault_switch", False)):
        raise PtxLibraryError(
            f"PTX library {path}: its manifest says fault_switch="
            f"{bool(manifest.get('fault_switch', False))}, the library "
            f"{'has' if switch else 'has no'} fault switch; {rebuild}"
        )
    return lib, manifest


def fault_state(lib: Any) -> str:
    """ "" for a plain library; for the test-only fault-switch build, which fault is on."""
    return str(lib.fpsm70_fault().decode("utf-8", "replace"))


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
