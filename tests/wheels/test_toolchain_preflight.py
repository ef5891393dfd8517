"""`build-wheel --toolchain none` checks the base image before it copies the tree.

With no toolchain installed by forkpatch, a base image without torch or nvcc used to
be found out only after the whole source (84 MiB for the fork) was copied into the
container and the build started. What the tree's build needs is read from the tree
itself (pyproject.toml's build requirements, a CUDA CMake build's nvcc), so a fork
that needs none of them asks for none, and the image is probed first.
"""

from __future__ import annotations

import subprocess

import pytest

from forkpatch.errors import BuildError
from forkpatch.wheels.toolchain import require_toolchain, toolchain_needs
from support import realfork

FORK_LIKE_PYPROJECT = b"""[build-system]
# Should be mirrored in requirements/build.txt
requires = [
    "cmake>=3.26.1",
    "ninja",
    "packaging>=24.2",
    "setuptools>=77.0.3,<81.0.0",
    "setuptools-scm>=8.0",
    "torch == 2.10.0",
    "wheel",
    "jinja2",
]
build-backend = "setuptools.build_meta"

[project]
name = "vllm"
"""
CUDA_CMAKE = b"project(vllm_extensions LANGUAGES CXX)\nset(VLLM_GPU_LANG CUDA)\n"


def _tree(**files: bytes) -> list[tuple[str, int, bytes]]:
    return [(name.replace("__", "/"), 0o100644, data) for name, data in files.items()]


def test_what_a_fork_like_tree_needs_is_read_from_its_files():
    tree = _tree(**{"pyproject.toml": FORK_LIKE_PYPROJECT, "CMakeLists.txt": CUDA_CMAKE})
    assert toolchain_needs(tree, {}) == [
        "command:cmake",
        "command:ninja",
        "module:packaging",
        "module:setuptools",
        "module:setuptools_scm",
        "module:torch",
        "module:wheel",
        "module:jinja2",
        "command:nvcc",
    ]


@pytest.mark.parametrize(
    ("files", "env", "needs"),
    [
        ({}, {}, []),  # setup.py only, as the example fork: nothing asked
        ({"setup.py": b"from setuptools import setup\nsetup()\n"}, {}, []),
        ({"CMakeLists.txt": CUDA_CMAKE}, {"VLLM_TARGET_DEVICE": "empty"}, []),
        ({"CMakeLists.txt": b"project(x LANGUAGES CXX)\n"}, {}, []),
        (
            {
                "pyproject.toml": b'[project]\nname="x"\n[build-system]\nrequires=["PyYAML", "bad req ("]\n'
            },
            {},
            ["module:yaml"],
        ),
    ],
    ids=["nothing", "setup-py", "python-only-target", "no-cuda", "names-and-a-bad-one"],
)
def test_a_tree_that_needs_less_asks_for_less(files, env, needs):
    assert toolchain_needs(_tree(**files), env) == needs


@pytest.mark.real_fork
def test_the_real_fork_needs_torch_and_nvcc():
    fork = realfork.fork_or_skip()
    realfork.tags_or_skip(realfork.BASE_TAG)

    def show(path: str) -> bytes:
        return subprocess.run(
            ["git", "--git-dir", realfork.git_dir(fork), "show", f"{realfork.BASE_TAG}:{path}"],
            capture_output=True,
            check=True,
        ).stdout

    tree = _tree(
        **{"pyproject.toml": show("pyproject.toml"), "CMakeLists.txt": show("CMakeLists.txt")}
    )
    needs = toolchain_needs(tree, {})
    assert {"module:torch", "command:nvcc", "command:cmake"} <= set(needs)


@pytest.mark.docker
def test_an_image_without_them_is_refused_naming_what_it_lacks(docker_client, standin_image):
    with pytest.raises(BuildError) as info:
        require_toolchain(
            docker_client,
            standin_image,
            ["module:torch", "command:nvcc", "module:json", "command:sh"],
            "the-base:tag",
        )
    message = str(info.value)
    assert "the-base:tag lacks" in message and "torch" in message and "nvcc" in message
    assert "json" not in message.split("needs")[1].split("(")[0]
    assert "nothing was copied" in message and "--toolchain apt" in message
    # What it has passes; nothing needed asks nothing.
    require_toolchain(docker_client, standin_image, ["module:json", "command:sh"], "x")
    require_toolchain(docker_client, standin_image, [], "x")
