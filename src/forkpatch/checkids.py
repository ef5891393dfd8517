"""The smoke checks' ids and tiers, spelled once.

series.yaml's validation (a patch's ``smoke:`` list) reads them, and so does the check
suite (:mod:`forkpatch.smoke.incheck`), which runs inside the smoke venv and takes a
copy of this file with it. So this module imports nothing: it must work wherever it
is copied.
"""

TIERS = ("static", "gpu", "sm70", "gpu-jit")

# The checks that run inside the smoke venv, in the order they run and are reported.
CHECK_IDS = (
    "static.installed-from-wheel",
    "static.version-metadata",
    "static.cli-version",
    "static.import-patched-modules",
    "static.provenance",
    "static.capability-floor-cpu",
    "static.odd-width-padding-cpu",
    "static.eager-block-cast-cpu",
    "static.packed-repack-cpu",
    "static.sm70-warmup-cpu",
    "gpu.cuda-compute",
    "sm70.cuda-stack",
    "sm70.capability",
    "sm70.ops-registered",
    "sm70.fp8-per-block-config",
    "sm70.odd-width-linear",
    "sm70.warmup",
    "sm70.tiny-model-generates",
    "gpu-jit.library",
    "gpu-jit.capability-floor",
    "gpu-jit.padding-helpers",
    "gpu-jit.eager-block-cast",
    "gpu-jit.odd-width-linear",
    "gpu-jit.packed-repack",
    "gpu-jit.warmup",
    "gpu-jit.kernel-matrix",
    "gpu-jit.refusals",
    "gpu-jit.unpadded-width",
)

# Each sm70 check and static CPU twin -> the gpu-jit checks that run the same check through
# the fork's kernels as PTX. A patch that asks for the first is checked by the second in
# the gpu-jit tier without naming it (series.yaml's patches name the sm70 checks).
GPU_JIT_TWINS = {
    "static.capability-floor-cpu": ("gpu-jit.capability-floor",),
    "static.odd-width-padding-cpu": ("gpu-jit.padding-helpers", "gpu-jit.odd-width-linear"),
    "static.eager-block-cast-cpu": ("gpu-jit.eager-block-cast",),
    "static.packed-repack-cpu": ("gpu-jit.packed-repack",),
    "static.sm70-warmup-cpu": ("gpu-jit.warmup",),
    "sm70.ops-registered": ("gpu-jit.library",),
    "sm70.fp8-per-block-config": ("gpu-jit.capability-floor",),
    "sm70.odd-width-linear": ("gpu-jit.odd-width-linear",),
    "sm70.warmup": ("gpu-jit.warmup",),
}

# The checks forkpatch runs on the host (forkpatch.smoke.kernels); a patch may name them too.
HOST_CHECK_IDS = ("static.kernel-archs",)
