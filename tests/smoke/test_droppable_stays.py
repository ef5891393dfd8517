"""`droppable` judges a patch by the whole series: the series without it must pass
every check the series declares for the patches that stay, not only the patch's own.

On the example project, eager-block-cast adds ``per_block_cast_to_fp8_eager``; its own
condition (``static.cli-version`` passes without it) holds. cli-version, above it,
declares a team check of the series: it uses what eager-block-cast adds (needed), fails
with every patch as well (the series is broken either way: not evaluated), or needs a
GPU this machine lacks (not run: not evaluated, with the reason).
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from forkpatch.series import load_series, save_series
from support import smoke
from support.cli import Runner

pytestmark = pytest.mark.slow

USES_EAGER_CAST = (
    "import importlib.util as u; "
    "src = open(u.find_spec('vllm.utils.deep_gemm').origin).read(); "
    "assert 'def per_block_cast_to_fp8_eager' in src, 'no eager cast in vllm.utils.deep_gemm'"
)
CASES = {
    # check id -> (its command, the verdict of eager-block-cast, words of the evidence)
    "uses-it": (
        "static.uses-eager-cast",
        USES_EAGER_CAST,
        "needed",
        (
            "static.uses-eager-cast, the check of 'cli-version' (which stays), passes with the "
            "patch and failed without it"
        ),
    ),
    "broken-anyway": (
        "static.always-fails",
        "raise SystemExit('the series is broken')",
        "not-evaluated",
        "static.always-fails, the check of 'cli-version', failed there with every patch",
    ),
    "cannot-run-here": (
        "gpu.uses-eager-cast",
        USES_EAGER_CAST,
        "not-evaluated",
        (
            "the checks of the patches that stay did not all run: gpu.uses-eager-cast of "
            "'cli-version' not run: "
        ),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_patch_the_patches_above_need_is_not_droppable(example_build, tmp_path, capsys, case):
    check, code, verdict, words = CASES[case]
    if case == "cannot-run-here":  # without torch: "module torch", not the tier
        pytest.importorskip("torch", reason="the verdict names the tier a CPU torch leaves out")
    project = smoke.copy_project(example_build, tmp_path / "project")
    path = project / "series.yaml"
    s = load_series(path)
    assert "smoke" not in s.sections
    team = {"checks": {check: {"command": ["python", "-c", code]}}}
    s = replace(s, sections={**s.sections, "smoke": team}).with_patches(
        [
            replace(p, drop_when_passes_without=("static.cli-version",))
            if p.name == "eager-block-cast"
            else replace(p, smoke=(check,))
            if p.name == "cli-version"
            else replace(p, smoke=())
            for p in s.patches
        ]
    )
    save_series(s, path)
    run = Runner(project, capsys)
    args = ["droppable", "eager-block-cast", "--base-wheel", str(example_build.base_wheel)]
    _code, out, _err = run(*args, "--json", expect=0)
    (got,) = json.loads(out)["patches"]
    assert got["verdict"] == verdict, got
    assert words in got["evidence"], got
    assert got["checks_without_patch"]["static.cli-version"] == "passed"
    if case == "cannot-run-here":
        assert got["missing"] == ["tier gpu"]
        assert "no CUDA" in got["evidence"] or "device" in got["evidence"], got
