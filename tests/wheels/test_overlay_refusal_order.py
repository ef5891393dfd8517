"""The overlay refusal names the changes that matter first: sources compiled into the
wheel (``csrc/``, the bundled flash-attention, CUDA/C++ the build reads), then the
build's configuration, then packaging files, then files the build never reads
(benchmarks, tests), whatever order the series touches them in."""

from __future__ import annotations

import pytest

from forkpatch.example import build_release_wheel
from forkpatch.wheels.overlay import by_importance, describe_compiled


@pytest.mark.parametrize(
    ("paths", "want"),
    [
        (
            ["MANIFEST.in", "benchmarks/kernels/bench_fp8.cu", "csrc/quantization/sm70.cu"],
            ["csrc/quantization/sm70.cu", "MANIFEST.in", "benchmarks/kernels/bench_fp8.cu"],
        ),
        (
            ["tests/kernels/x.cpp", "requirements/cuda.txt", "CMakeLists.txt", "vllm/ext.pyx"],
            ["vllm/ext.pyx", "CMakeLists.txt", "requirements/cuda.txt", "tests/kernels/x.cpp"],
        ),
        (
            ["setup.py", "flash-attention-v100/csrc/flash_fwd.cu", "cmake/utils.cmake"],
            ["flash-attention-v100/csrc/flash_fwd.cu", "setup.py", "cmake/utils.cmake"],
        ),
        (["examples/x.cu", "kernel.cu"], ["kernel.cu", "examples/x.cu"]),
    ],
)
def test_compiled_paths_are_ordered_by_what_matters(paths, want):
    assert by_importance(paths) == want


def test_the_description_groups_them_and_counts_the_rest():
    paths = ["MANIFEST.in", *(f"benchmarks/b{i}.cu" for i in range(12)), "csrc/a.cu"]
    text = describe_compiled(paths, limit=4)
    assert text.startswith("compiled into the wheel: csrc/a.cu; packaging metadata: MANIFEST.in;")
    assert "outside the build: benchmarks/b0.cu, benchmarks/b1.cu (and 10 more)" in text


def test_build_wheel_refuses_an_overlay_naming_csrc_first(
    example_project, example_fork, tmp_path, monkeypatch
):
    project, run = example_project
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")  # no container build
    run("apply")
    run("new", "kernels")
    wt = project / ".forkpatch" / "worktree"
    for rel, text in {
        "MANIFEST.in": "include LICENSE\n",
        "benchmarks/kernels/bench_fp8.cu": "// bench\n",
        "csrc/quantization/sm70_fp8.cu": "// kernel\n",
    }.items():
        (wt / rel).parent.mkdir(parents=True, exist_ok=True)
        (wt / rel).write_text(text)
    run("refresh")
    wheel = build_release_wheel(example_fork.path, "v1.2.1", tmp_path / "release")
    _, _, err = run("build-wheel", "--mode", "overlay", "--base-wheel", str(wheel), expect=1)
    line = next(ln for ln in err.splitlines() if "cannot include changes to compiled code" in ln)
    assert line.index("csrc/quantization/sm70_fp8.cu") < line.index("MANIFEST.in")
    assert line.index("MANIFEST.in") < line.index("benchmarks/kernels/bench_fp8.cu")
    assert "compiled into the wheel: csrc/quantization/sm70_fp8.cu" in line
    # auto mode names the same first (then finds no engine)
    _, _, err = run("build-wheel", "--base-wheel", str(wheel), expect=1)
    assert "the series touches compiled code (csrc/quantization/sm70_fp8.cu" in err
