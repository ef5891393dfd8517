"""The smoke checks themselves, run *inside* the isolated smoke environment.

This package is copied into the smoke venv as a unit, with the one module it reads
from outside it (:mod:`forkpatch.checkids`, the ids and tiers) in the same place
relative to it, and run there with the venv's interpreter in isolated mode (``-I``:
:mod:`__main__` with ``--spec SPEC --out RESULTS``), so the forkpatch source tree is
never on ``sys.path`` and ``vllm`` can only come from the installed wheel. It must
therefore stay standalone: standard library at import time, relative imports within
the package, ``torch`` (and the fork's ``vllm``) imported lazily inside the checks
that need them. forkpatch itself imports it only to read :data:`REGISTRY` (ids, tiers,
needs, summaries) and to run single checks in its tests.

The modules, by job: :mod:`.registry` (the registry, outcomes, the gate and the runner
of one check), :mod:`.sm70ops` and :mod:`.ptxlib` (the ops the SM70 checks drive),
:mod:`.layers` (those checks), :mod:`.static`, :mod:`.gpu` and :mod:`.gpujit` (the
tiers' registered checks), :mod:`.__main__` (the check process).

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

from ...checkids import CHECK_IDS, TIERS
from . import gpu, gpujit, static
from .layers import (
    assert_within_tolerance,
    capability_floor_check,
    eager_block_cast_check,
    kernel_tolerance,
    padding_helpers_check,
    sm70_linear_check,
    sm70_unsupported_k_check,
    sm70_warmup_check,
)
from .ptxlib import PtxLibraryError, PtxSm70Ops, load_ptx_library
from .registry import (
    DISTRIBUTIONS,
    ERROR,
    FAILED,
    HOOK_ABSENT,
    NOT_RUN,
    ODD_WIDTH,
    PASSED,
    REGISTRY,
    TIER_RUNS,
    CheckDef,
    Ctx,
    NotRun,
    absent_hook,
    check,
    finish_registry,
    gate,
    launch_argv,
    missing_module_reason,
    missing_modules,
    patched,
    probe_device,
    run_one,
    run_order,
    run_spec,
    start_early,
)
from .sm70ops import (
    FAULTS,
    SM70_WARMUP_GATES,
    GpuLikeSm70Ops,
    RealSm70Ops,
    ReferenceSm70Ops,
    reference_ops,
)
from .static import cli_version, write_cpu_platform_plugin

finish_registry()  # the tiers' modules, imported above, have registered their checks

__all__ = [
    "CHECK_IDS",
    "DISTRIBUTIONS",
    "ERROR",
    "FAILED",
    "FAULTS",
    "HOOK_ABSENT",
    "NOT_RUN",
    "ODD_WIDTH",
    "PASSED",
    "REGISTRY",
    "SM70_WARMUP_GATES",
    "TIERS",
    "TIER_RUNS",
    "CheckDef",
    "Ctx",
    "GpuLikeSm70Ops",
    "NotRun",
    "PtxLibraryError",
    "PtxSm70Ops",
    "RealSm70Ops",
    "ReferenceSm70Ops",
    "absent_hook",
    "assert_within_tolerance",
    "capability_floor_check",
    "check",
    "cli_version",
    "eager_block_cast_check",
    "gate",
    "gpu",
    "gpujit",
    "kernel_tolerance",
    "launch_argv",
    "load_ptx_library",
    "missing_module_reason",
    "missing_modules",
    "padding_helpers_check",
    "patched",
    "probe_device",
    "reference_ops",
    "run_one",
    "run_order",
    "run_spec",
    "sm70_linear_check",
    "sm70_unsupported_k_check",
    "sm70_warmup_check",
    "start_early",
    "static",
    "write_cpu_platform_plugin",
]
