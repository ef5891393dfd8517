"""The tiers with a CUDA-looking platform, on the real fork (opt-in, real_fork). On a CPU
machine (CI) vLLM picks no platform or its CPU one, so the Python-only wheel's missing
``vllm._C`` went unseen; on a CUDA machine vLLM's CUDA platform imports it
unconditionally and 7 static checks failed. Here a companion wheel registers a vLLM
platform plugin that answers ``vllm.platforms.cuda.CudaPlatform``, as detection does on
a CUDA machine. With it, `vllm --version` (a process of its own, which imports the CUDA
platform and so ``vllm._C``) must pass, no check may fail for the missing ``vllm._C``, and
the report says it was stood in for. (The layer checks call torch.cuda under that
platform, which a CPU build of torch refuses: "Torch not compiled with CUDA enabled" is
this machine, not the wheel; the lent H200 ran them all, docs/gpu-jit.md.)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from forkpatch.cli import main
from support import REPO_ROOT, realfork
from support.wheelfactory import build_wheel

pytestmark = pytest.mark.real_fork

PLUGIN = "def activate():\n    return 'vllm.platforms.cuda.CudaPlatform'\n"


def _cuda_platform_wheel(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    return build_wheel(
        out,
        {"forkpatch_test_cuda_platform.py": PLUGIN.encode()},
        name="forkpatch-test-cuda-platform",
        version="0",
        entry_points="[vllm.platform_plugins]\ncuda_look = forkpatch_test_cuda_platform:activate\n",
    )


def test_the_static_tier_needs_no_compiled_extension_on_vllms_cuda_platform(tmp_path, capsys):
    fork = realfork.fork_or_skip()
    realfork.modules_or_skip()
    base = realfork.fixture_wheel_or_skip()
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy2(REPO_ROOT / "series.yaml", project / "series.yaml")
    shutil.copytree(REPO_ROOT / "patches", project / "patches")
    pre = ["-C", str(project), "--fork-repo", fork]
    assert main([*pre, "build-wheel", "--mode", "overlay", "--base-wheel", str(base)]) == 0
    (wheel,) = (project / "dist").glob("1cat_vllm-*.whl")
    plugin = _cuda_platform_wheel(tmp_path / "plugin")
    capsys.readouterr()
    code = main([*pre, "smoke", str(wheel), str(plugin), "--tier", "static", "--json"])
    out, err = capsys.readouterr()
    report = json.loads(out)
    outcomes = {c["id"]: (c["outcome"], c["detail"]) for c in report["checks"]}
    assert outcomes["static.cli-version"][0] == "passed", (outcomes, err[-3000:])
    for cid in ("static.installed-from-wheel", "static.version-metadata", "static.provenance"):
        assert outcomes[cid][0] == "passed", outcomes[cid]
    assert not [c for c, (_, d) in outcomes.items() if "vllm._C" in d], outcomes
    cpu_torch = {c for c, (o, _) in outcomes.items() if o != "passed" and c.startswith("static.")}
    assert all("Torch not compiled with CUDA enabled" in outcomes[c][1] for c in cpu_torch), {
        c: (outcomes[c][0], outcomes[c][1][:400]) for c in cpu_torch
    }
    assert code == (1 if cpu_torch else 0)
    assert any("vllm._C" in n and "stand-in" in n for n in report["notes"]), report["notes"]
