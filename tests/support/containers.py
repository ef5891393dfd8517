"""The container-build tests' fork: a synthetic stand-in for the 1Cat-vLLM tree."""

from __future__ import annotations

import textwrap
from pathlib import Path


# A C file big enough that compiling it takes measurable time at -O2, so the
# cold vs cache-hit difference is visible; still a real Python extension.
def _c_extension(module: str, functions: int) -> str:
    body = [
        "#define PY_SSIZE_T_CLEAN",
        "#include <Python.h>",
        "",
    ]
    for i in range(functions):
        body.append(
            f"static double kernel_{i}(const double *x, int n) {{ double acc = {i}.0;"
            f" for (int k = 0; k < n; ++k) {{ acc += x[k] * (k ^ {i}) / (1.0 + acc * acc);"
            f" if (acc > 1e9) acc = acc / {i + 3}.0; }} return acc; }}"
        )
    body.append("static PyObject *checksum(PyObject *self, PyObject *args) {")
    body.append("    double x[8] = {1, 2, 3, 4, 5, 6, 7, 8}; double s = 0;")
    for i in range(functions):
        body.append(f"    s += kernel_{i}(x, 8);")
    body.append("    return PyFloat_FromDouble(s);\n}")
    body.append(
        textwrap.dedent(
            f"""
            static PyMethodDef methods[] = {{
                {{"checksum", checksum, METH_NOARGS, "sum of the kernels"}},
                {{NULL, NULL, 0, NULL}}
            }};
            static struct PyModuleDef moddef = {{PyModuleDef_HEAD_INIT, "{module}", NULL, -1, methods}};
            PyMODINIT_FUNC PyInit_{module.rsplit(".", 1)[-1]}(void) {{ return PyModule_Create(&moddef); }}
            """
        )
    )
    return "\n".join(body) + "\n"


def make_synthetic_fork(root: Path, *, functions: int = 250, broken: bool = False) -> Path:
    """A tiny stand-in for the 1Cat-vLLM tree.

    ``vllm/`` + ``setup.py`` building a ``1cat-vllm`` wheel whose version is
    VLLM_VERSION_OVERRIDE, two C extension sources (compiled through the
    cache launcher) and a ``flash-attention-v100/`` sub-project with its own
    setup.py and extension. ``broken`` gives a C syntax error.
    """
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("from vllm.version import __version__\n")
    (root / "vllm" / "version.py").write_text(
        "try:\n    from vllm._version import __version__\nexcept ImportError:\n"
        "    __version__ = '0.0.0+unknown'\n"
    )
    (root / "csrc").mkdir()
    (root / "csrc" / "ops_a.c").write_text(_c_extension("vllm._C", functions))
    (root / "csrc" / "ops_b.c").write_text(_c_extension("vllm._moe_C", functions))
    if broken:
        (root / "csrc" / "ops_b.c").write_text(
            "#include <Python.h>\nint broken(void) { return 1 +; }\n"
        )
    (root / "setup.py").write_text(
        textwrap.dedent(
            """
            import os
            from setuptools import Extension, setup

            version = os.environ.get("VLLM_VERSION_OVERRIDE")
            if not version:
                raise SystemExit("VLLM_VERSION_OVERRIDE is not set")
            with open("vllm/_version.py", "w") as fh:
                fh.write(f"__version__ = {version!r}\\n")
            arch = os.environ.get("TORCH_CUDA_ARCH_LIST", "?")
            print(f"synthetic fork: version {version}, arch {arch}, MAX_JOBS {os.environ.get('MAX_JOBS')}")
            print("stale build dir present:", os.path.exists("build/stale.txt"))
            print("git dir present:", os.path.exists(".git"))
            setup(
                name="1cat-vllm",
                version=version,
                packages=["vllm"],
                ext_modules=[
                    Extension("vllm._C", ["csrc/ops_a.c"], extra_compile_args=["-O2"]),
                    Extension("vllm._moe_C", ["csrc/ops_b.c"], extra_compile_args=["-O2"]),
                ],
            )
            """
        )
    )
    fa = root / "flash-attention-v100"
    (fa / "flash_attn_v100").mkdir(parents=True)
    (fa / "flash_attn_v100" / "__init__.py").write_text("__version__ = '2.6.3'\n")
    (fa / "csrc").mkdir()
    (fa / "csrc" / "fa.c").write_text(_c_extension("flash_attn_v100._C", functions // 3))
    (fa / "setup.py").write_text(
        textwrap.dedent(
            """
            import os
            from setuptools import Extension, setup

            assert "VLLM_VERSION_OVERRIDE" not in os.environ, "fa has its own version"
            print("flash-attention-v100 arch", os.environ.get("FLASH_ATTN_V100_CUDA_ARCH_LIST"))
            setup(
                name="flash-attn-v100",
                version="2.6.3",
                packages=["flash_attn_v100"],
                ext_modules=[Extension("flash_attn_v100._C", ["csrc/fa.c"], extra_compile_args=["-O2"])],
            )
            """
        )
    )
    # Things that must not travel into the container.
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "build").mkdir()
    (root / "build" / "stale.txt").write_text("stale CMake cache\n")
    return root


def build_containers(client) -> list:  # type: ignore[no-untyped-def]
    """All forkpatch build containers (running or not) on the engine."""
    return client.containers.list(all=True, filters={"label": "org.forkpatch.wheels"})


def is_elf(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4) == b"\x7fELF"
