"""The gpu-jit tier runs what makes it meaningful: each patch's sm70 check (and static
CPU twin) brings its gpu-jit twin, asked for by the same patch, without series.yaml
naming gpu-jit checks; the kernel-level checks run for every wheel (a patch-less series
too); the report counts how many of a tier's checks ran. And a check that exists to
prove a patch fails, naming the absent hook, when the patch is not there (an error from
an exception was no evidence for droppable and --bisect).
"""

from __future__ import annotations

import types

import pytest

from forkpatch.checkids import CHECK_IDS, GPU_JIT_TWINS
from forkpatch.series import PatchEntry, load_series
from forkpatch.smoke import checks, incheck
from forkpatch.smoke.report import CheckResult, SmokeReport, WheelEntry
from support import REPO_ROOT

KERNEL_LEVEL = [
    "gpu-jit.library",
    "gpu-jit.kernel-matrix",
    "gpu-jit.refusals",
    "gpu-jit.unpadded-width",
]
GPU_JIT = [c for c in CHECK_IDS if c.startswith("gpu-jit.")]


def _gpu_jit(plan: dict[str, list[str]]) -> list[str]:
    return [c for c in plan if c.startswith("gpu-jit.")]


def test_the_real_series_plans_every_gpu_jit_check():
    series = load_series(REPO_ROOT / "series.yaml")
    plan = checks.plan(series.patches, series)
    assert sorted(_gpu_jit(plan)) == sorted(GPU_JIT)
    # asked for by the patches whose sm70 / static checks they twin
    assert "packed-repack" in plan["gpu-jit.packed-repack"]
    assert "odd-width-padding" in plan["gpu-jit.odd-width-linear"]
    assert plan["gpu-jit.kernel-matrix"] == []  # kernel-level: every wheel


def test_a_patch_less_series_still_runs_the_kernel_level_checks():
    assert _gpu_jit(checks.plan([])) == KERNEL_LEVEL


@pytest.mark.parametrize(
    ("declared", "twins"),
    [
        (("sm70.odd-width-linear",), ["gpu-jit.odd-width-linear"]),
        (("sm70.warmup",), ["gpu-jit.warmup"]),
        (("static.packed-repack-cpu",), ["gpu-jit.packed-repack"]),
        (("static.eager-block-cast-cpu",), ["gpu-jit.eager-block-cast"]),
        (("sm70.fp8-per-block-config",), ["gpu-jit.capability-floor"]),
        (("sm70.tiny-model-generates",), []),  # no gpu-jit form
        (("gpu-jit.warmup",), ["gpu-jit.warmup"]),  # declared directly
    ],
)
def test_each_declared_check_brings_its_twins_for_the_same_patch(declared, twins):
    entry = PatchEntry(name="p", summary="s", file="p.patch", smoke=declared)
    plan = checks.plan([entry])
    derived = [c for c in _gpu_jit(plan) if c not in KERNEL_LEVEL]
    assert derived == twins
    assert all(plan[c] == ["p"] for c in derived)


def test_every_twin_is_a_gpu_jit_check_of_a_known_one():
    for source, twins in GPU_JIT_TWINS.items():
        assert source in CHECK_IDS and not source.startswith("gpu-jit.")
        assert twins and all(t in GPU_JIT for t in twins)
    # every gpu-jit check is a twin or kernel-level: none is left unrun by a full series
    covered = {t for ts in GPU_JIT_TWINS.values() for t in ts} | set(KERNEL_LEVEL)
    assert covered == set(GPU_JIT)


def test_the_report_counts_the_checks_of_each_tier_that_ran():
    reg = checks.registry()
    ran = {"gpu-jit.library": "passed", "gpu-jit.kernel-matrix": "failed"}
    report = SmokeReport(
        wheels=[WheelEntry("a" * 64, file="w.whl")],
        primary_sha256="a" * 64,
        version="1",
        requested_tiers=["static", "gpu", "gpu-jit"],
        checks=[CheckResult(c, reg[c].tier, o, 0.1, "", []) for c, o in ran.items()]
        + [CheckResult("gpu-jit.warmup", "gpu-jit", "not-run", 0.0, "why", [])],
        environment={},
        device={},
        patches=[],
    )
    detail = report.tiers["gpu-jit"]
    assert (detail.ran, detail.of) == (2, len(GPU_JIT))
    assert report.to_json()["tiers"]["detail"]["gpu-jit"]["of"] == len(GPU_JIT)


# --------------------------------------------------------------------------- hooks


def _run(func) -> dict:
    defn = incheck.CheckDef("static.packed-repack-cpu", "static", func)
    return incheck.run_one(defn, incheck.Ctx(spec={"version": "1"}, device={}))


class _Method:  # a class of the wheel's, as vllm's Fp8PerBlockOnlineLinearMethod
    pass


_Method.__module__ = "vllm.model_executor.layers.quantization.online.fp8"


def test_an_attribute_a_patch_adds_missing_from_the_wheels_class_is_a_failure():
    res = _run(lambda ctx: _Method().use_sm70_fp8)
    assert res["outcome"] == "failed"
    assert res["detail"].startswith(
        "the patch's hook is absent: vllm.model_executor.layers.quantization.online.fp8."
    )
    assert "_Method.use_sm70_fp8" in res["detail"].splitlines()[0]


def test_a_function_missing_from_the_wheels_module_is_a_failure():
    mod = types.ModuleType("vllm.model_executor.layers.quantization.online.fp8")
    res = _run(lambda ctx: mod.pad_fp8_rows_to_block)
    assert res["outcome"] == "failed"
    assert ".online.fp8.pad_fp8_rows_to_block" in res["detail"].splitlines()[0]


def test_a_name_that_cannot_be_imported_from_the_wheel_is_a_failure():
    def check(ctx):
        raise ImportError(
            "cannot import name 'pad_fp8_rows_to_block' from "
            "'vllm.model_executor.layers.quantization.online.fp8' (/x/fp8.py)"
        )

    res = _run(check)
    assert res["outcome"] == "failed" and "pad_fp8_rows_to_block" in res["detail"]


@pytest.mark.parametrize(
    "check",
    [
        pytest.param(lambda ctx: types.SimpleNamespace().missing, id="a-non-wheel-object"),
        pytest.param(lambda ctx: __import__("json").no_such_thing, id="a-stdlib-module"),
        pytest.param(lambda ctx: (_ for _ in ()).throw(RuntimeError("x")), id="runtime-error"),
    ],
)
def test_other_exceptions_stay_errors(check):
    assert _run(check)["outcome"] == "error"


def test_a_processed_layer_without_the_patchs_attributes_fails_naming_them():
    """A layer the check made (a torch Module, not the wheel's) lacks what packed-repack
    sets on it: the check says which, as a failure."""
    with pytest.raises(AssertionError, match="hook is absent: the processed 8x16 layer"):
        _layer_hooks()


def _layer_hooks():
    pytest.importorskip("torch")
    from forkpatch.smoke.incheck import layers

    return layers.require_layer_hooks(types.SimpleNamespace(), 8, 16)
