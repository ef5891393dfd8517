"""A small scratch repository shaped like the fork, for the demo and the tests.

It has a ``vllm/`` package with the files the real patch set touches (with the
same function names), a ``setup.py`` that builds a ``1cat-vllm`` wheel whose
version comes from ``VLLM_VERSION_OVERRIDE`` like the fork's, a ``csrc/`` file
standing for compiled code, and tags with drift between them:

- ``v1.2.0``: the starting point;
- ``v1.2.1``: drift (a new module, edits far from the patched lines);
- ``v1.3.0``: upstream took the CLI version fix verbatim (so that patch is
  *upstreamed*), edited a line next to the padding code (so that patch needs a
  3-way merge), and rewrote ``quantization/fp8.py`` (moved code around).

Also a series of example patches against ``v1.2.1`` (:data:`EXAMPLE_PATCHES`).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

ONLINE = "vllm/model_executor/layers/quantization/online"

BASE_PY = '''"""Online quantization: quantize BF16 checkpoints while loading them."""

from vllm.platforms import current_platform


class OnlineQuantizationConfig:
    """Base of the online quantization methods (fp8_per_block, ...)."""

    name = "online"

    @classmethod
    def get_min_capability(cls) -> int:
        # Online FP8 needs hardware FP8 or Marlin: Turing and newer.
        return 75

    def get_name(self) -> str:
        return self.name

    def describe(self) -> str:
        return f"{self.get_name()} (min capability {self.get_min_capability()})"
'''

FP8_PY = '''"""Per-block FP8 online quantization."""

from vllm.utils.deep_gemm import per_block_cast_to_fp8

BLOCK = 128


class Fp8PerBlockOnlineLinearMethod:
    """Quantizes a linear layer's weight to FP8 with 128x128 block scales."""

    def __init__(self, config):
        self.config = config
        self.block = BLOCK

    def process_weights_after_loading(self, layer):
        import torch

        weight = layer.weight
        qweight, scales = per_block_cast_to_fp8(weight)
        layer.weight = qweight
        layer.weight_scale = scales
        layer.true_n = weight.shape[0]
        self.init_kernel(layer)

    def init_kernel(self, layer):
        # Pick a generic FP8 kernel for this GPU.
        layer.kernel = "generic"

    def apply(self, layer, x, bias=None):
        import torch

        out = torch.nn.functional.linear(x, layer.weight.to(x.dtype))
        if bias is not None:
            out = out + bias
        return out
'''

DEEP_GEMM_PY = '''"""Helpers around DeepGEMM-style per-block FP8 casts."""

import functools


def _per_block_cast_to_fp8(x, block=128):
    """Cast a 2-D tensor to FP8 with one scale per block x block tile."""
    rows, cols = x.shape
    scales = x.abs().amax().clamp(min=1e-4) / 448.0
    return (x / scales), scales.expand((rows + block - 1) // block, (cols + block - 1) // block)


@functools.cache
def _compiled_cast():
    import torch  # imported on first use: importing vllm must not need a GPU stack

    return torch.compile(_per_block_cast_to_fp8, backend="inductor")


def per_block_cast_to_fp8(x, block=128):
    return _compiled_cast()(x, block)
'''

CLI_MAIN_PY = '''"""The `vllm` command line."""

import argparse
import importlib.metadata


def main(argv=None):
    parser = argparse.ArgumentParser(prog="vllm")
    parser.add_argument("--version", action="version",
                        version=importlib.metadata.version("vllm"))
    parser.add_argument("command", nargs="?", default="serve")
    args = parser.parse_args(argv)
    print(f"vllm {args.command}")
    return 0
'''

CLI_MAIN_FIXED_PY = CLI_MAIN_PY.replace(
    "import argparse\nimport importlib.metadata\n",
    "import argparse\n\nfrom vllm.version import __version__ as VLLM_VERSION\n",
).replace('version=importlib.metadata.version("vllm"))', "version=VLLM_VERSION)")

VERSION_PY = '''"""The package version, written by setuptools-scm at build time."""

try:
    from ._version import __version__, __version_tuple__
except ImportError:  # a source tree without a build
    __version__ = "dev"
    __version_tuple__ = (0, 0, "dev")
'''

PLATFORMS_PY = '''"""Platform detection."""


class _Platform:
    def get_device_capability(self):
        return (7, 0)

    def is_cuda(self):
        return True


current_platform = _Platform()
'''

QUANT_FP8_PY = '''"""Pre-quantized FP8 checkpoints."""


class Fp8Config:
    @classmethod
    def get_min_capability(cls) -> int:
        return 70


class Fp8LinearMethod:
    def __init__(self, config):
        self.config = config
'''

SETUP_PY = '''"""Builds the `1cat-vllm` wheel (a tiny stand-in for the fork's setup.py)."""

import os

from setuptools import find_packages, setup

VERSION = os.environ.get("VLLM_VERSION_OVERRIDE") or "{version}"

os.makedirs("vllm", exist_ok=True)
with open(os.path.join("vllm", "_version.py"), "w") as fh:
    parts = tuple(int(p) if p.isdigit() else p for p in VERSION.split("+")[0].split("."))
    fh.write(f"__version__ = version = {{VERSION!r}}\\n__version_tuple__ = version_tuple = {{parts!r}}\\n")

setup(
    name="1cat-vllm",
    version=VERSION,
    packages=find_packages(include=["vllm", "vllm.*"]),
    entry_points={{"console_scripts": ["vllm=vllm.entrypoints.cli.main:main"]}},
)
'''

CSRC_CU = """// Stand-in for the fork's CUDA sources (not compiled by the example).
__global__ void noop() {}
"""

GITIGNORE = "vllm/_version.py\nbuild/\ndist/\n*.egg-info/\n__pycache__/\n"


def _files_v120() -> dict[str, str]:
    files = {
        "README.md": "# 1Cat-vLLM (example)\n\nA scratch repository shaped like the fork.\n",
        ".gitignore": GITIGNORE,
        "setup.py": SETUP_PY.format(version="1.2.0"),
        "csrc/ops.cu": CSRC_CU,
        "vllm/__init__.py": '"""vLLM (example)."""\n\nfrom vllm.version import __version__\n',
        "vllm/version.py": VERSION_PY,
        "vllm/platforms/__init__.py": PLATFORMS_PY,
        "vllm/utils/__init__.py": "",
        "vllm/utils/deep_gemm.py": DEEP_GEMM_PY,
        "vllm/entrypoints/__init__.py": "",
        "vllm/entrypoints/cli/__init__.py": "",
        "vllm/entrypoints/cli/main.py": CLI_MAIN_PY,
        "vllm/model_executor/__init__.py": "",
        "vllm/model_executor/layers/__init__.py": "",
        "vllm/model_executor/layers/quantization/__init__.py": "",
        "vllm/model_executor/layers/quantization/fp8.py": QUANT_FP8_PY,
        f"{ONLINE}/__init__.py": "",
        f"{ONLINE}/base.py": BASE_PY,
        f"{ONLINE}/fp8.py": FP8_PY,
    }
    return files


def _git(repo: Path, *args: str, date: str | None = None) -> str:
    from forkpatch.git import git_env

    env = git_env(
        {
            "GIT_AUTHOR_NAME": "1Cat maintainers",
            "GIT_AUTHOR_EMAIL": "maintainers@example.invalid",
            "GIT_COMMITTER_NAME": "1Cat maintainers",
            "GIT_COMMITTER_EMAIL": "maintainers@example.invalid",
        }
    )
    if date:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    return (
        subprocess.run(
            ["git", "-C", str(repo), *args],
            check=True,
            env=env,
            capture_output=True,
        )
        .stdout.decode()
        .strip()
    )


def _write(repo: Path, files: dict[str, str | None]) -> None:
    for rel, text in files.items():
        path = repo / rel
        if text is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _commit(repo: Path, message: str, date: str) -> str:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message, date=date)
    return _git(repo, "rev-parse", "HEAD")


@dataclass(frozen=True)
class ExampleFork:
    path: Path
    tags: dict[str, str]


def make_fork(path: Path, *, with_v130: bool = True) -> ExampleFork:
    """Create the example fork repository at ``path`` (must not exist or be empty)."""
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q", "-b", "main")
    tags: dict[str, str] = {}
    _write(path, _files_v120())  # type: ignore[arg-type]
    _commit(path, "Initial import of the SM70 fork", "2026-06-20T10:00:00Z")
    _git(path, "tag", "-a", "v1.2.0", "-m", "v1.2.0", date="2026-06-20T10:00:00Z")
    tags["v1.2.0"] = _git(path, "rev-parse", "HEAD")

    # v1.2.1: drift far from the patched lines.
    _write(
        path,
        {
            "setup.py": SETUP_PY.format(version="1.2.1"),
            "vllm/utils/math_utils.py": '"""Small math helpers."""\n\n\ndef cdiv(a, b):\n'
            "    return -(a // -b)\n\n\ndef round_up(x, m):\n"
            "    return cdiv(x, m) * m\n",
            "vllm/utils/deep_gemm.py": '"""Helpers around DeepGEMM-style per-block FP8 casts.\n\n'
            'Used by the online FP8 path.\n"""\n' + DEEP_GEMM_PY.split('"""', 2)[2],
        },
    )
    _commit(path, "Add math helpers; document deep_gemm", "2026-06-22T10:00:00Z")
    _write(
        path,
        {
            "README.md": "# 1Cat-vLLM (example)\n\nA scratch repository shaped like the "
            "fork.\n\n## Release 1.2.1\n\nBug fixes.\n"
        },
    )
    _commit(path, "[Doc] Update 1.2.1 release notes", "2026-06-23T10:00:00Z")
    _git(path, "tag", "-a", "v1.2.1", "-m", "v1.2.1", date="2026-06-23T10:00:00Z")
    tags["v1.2.1"] = _git(path, "rev-parse", "HEAD")

    if with_v130:
        _write(path, {"vllm/entrypoints/cli/main.py": CLI_MAIN_FIXED_PY})
        _commit(path, "[Bugfix] Read CLI version from the package", "2026-07-10T10:00:00Z")
        fp8 = (path / f"{ONLINE}/fp8.py").read_text(encoding="utf-8")
        fp8 = fp8.replace(
            "        layer.weight_scale = scales\n", "        layer.weight_scale = scales.float()\n"
        )
        _write(
            path,
            {
                f"{ONLINE}/fp8.py": fp8,
                "vllm/model_executor/layers/quantization/fp8.py": '"""Pre-quantized FP8 checkpoints (rewritten for 1.3)."""\n\n\n'
                "class Fp8LinearMethod:\n    def __init__(self, config):\n"
                "        self.config = config\n\n\nclass Fp8Config:\n"
                "    @classmethod\n    def get_min_capability(cls) -> int:\n"
                "        return 70\n",
                "setup.py": SETUP_PY.format(version="1.3.0"),
            },
        )
        _commit(path, "Keep block scales in fp32; rewrite fp8.py", "2026-08-10T10:00:00Z")
        _git(path, "tag", "-a", "v1.3.0", "-m", "v1.3.0", date="2026-08-17T10:00:00Z")
        tags["v1.3.0"] = _git(path, "rev-parse", "HEAD")
    return ExampleFork(path=path, tags=tags)


# The example series: (name, summary, why, description, {path: new text}).
def example_patches() -> list[tuple[str, str, str, dict[str, str]]]:
    base = BASE_PY.replace(
        "    @classmethod\n    def get_min_capability(cls) -> int:\n"
        "        # Online FP8 needs hardware FP8 or Marlin: Turing and newer.\n"
        "        return 75\n",
        "    @classmethod\n    def get_min_capability(cls) -> int:\n"
        "        # Online FP8 needs hardware FP8 or Marlin: Turing and newer,\n"
        "        # or Volta when the fork's SM70 FP8 op is present.\n"
        "        if current_platform.is_cuda() and \\\n"
        "                current_platform.get_device_capability() == (7, 0):\n"
        "            return 70\n"
        "        return 75\n",
    )
    fp8 = FP8_PY.replace(
        "        layer.true_n = weight.shape[0]\n",
        "        layer.true_n = weight.shape[0]\n"
        "        pad = (-layer.true_n) % self.block\n"
        "        if pad:\n"
        "            # Block kernels want whole 128-row blocks: zero-pad the rows.\n"
        "            layer.weight = torch.nn.functional.pad(qweight, (0, 0, 0, pad))\n",
    ).replace(
        "        if bias is not None:\n",
        "        out = out[..., : layer.true_n]\n        if bias is not None:\n",
    )
    deep_gemm_tail = (
        "\n\ndef per_block_cast_to_fp8_eager(x, block=128):\n"
        '    """The same cast without torch.compile: Triton cannot run fp8 on Volta."""\n'
        "    return _per_block_cast_to_fp8(x, block)\n"
    )
    return [
        (
            "capability-floor",
            "Accept online fp8_per_block on compute capability 7.0",
            "V100s are 7.0; the online path refuses anything below 7.5.",
            {f"{ONLINE}/base.py": base},
        ),
        (
            "odd-width-padding",
            "Zero-pad per-block FP8 rows to a whole block",
            "Fused projections have widths that are not multiples of 128.",
            {f"{ONLINE}/fp8.py": fp8},
        ),
        (
            "eager-block-cast",
            "Add an eager per-block FP8 cast for SM70",
            "Triton refuses fp8e4nv on Volta, so the compiled cast cannot run.",
            {"vllm/utils/deep_gemm.py": "APPEND:" + deep_gemm_tail},
        ),
        (
            "cli-version",
            "Read the CLI version from the package",
            "The wheel installs as 1cat-vllm, so version('vllm') fails.",
            {"vllm/entrypoints/cli/main.py": CLI_MAIN_FIXED_PY},
        ),
    ]


def write_example_patches(fork: Path, tag: str, out_dir: Path) -> list[Path]:
    """Make the example patches as git format-patch files against ``tag``.

    They are produced by real commits on a scratch branch of the example fork,
    then exported with ``git format-patch``: exactly what a developer would
    hand to ``forkpatch import``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    _git(fork, "checkout", "-q", "-b", "example-patches", tag)
    try:
        for name, summary, why, files in example_patches():
            edits: dict[str, str | None] = {}
            for rel, text in files.items():
                if text.startswith("APPEND:"):
                    text = (fork / rel).read_text(encoding="utf-8") + text[len("APPEND:") :]
                edits[rel] = text
            _write(fork, edits)
            _git(fork, "add", "-A")
            _git(
                fork,
                "commit",
                "-q",
                "-m",
                # The commit a forkpatch work tree makes: "name: summary" and the
                # trailer that names the patch (import reads the name from it).
                f"{name}: {summary}\n\n{why}\n\nForkpatch-Patch: {name}",
                date="2026-06-24T10:00:00Z",
            )
        out = _git(
            fork,
            "format-patch",
            "-q",
            "--zero-commit",
            "--no-signature",
            "-o",
            str(out_dir),
            f"{tag}..HEAD",
        )
    finally:
        _git(fork, "checkout", "-q", "main")
        _git(fork, "branch", "-q", "-D", "example-patches")
    paths = sorted(out_dir.glob("*.patch"))
    del out
    return paths


def build_release_wheel(fork: Path, tag: str, out_dir: Path, *, version: str | None = None) -> Path:
    """The fork's "released wheel" for ``tag``, built without network or setuptools.
    ``tag`` may be any commit of the fork when ``version`` names its version (a
    build between releases: ``1.3.1.dev2+g<commit>``).

    It holds what the fork's setup.py would put in a Python-only wheel: the
    ``vllm`` package at ``tag``, ``vllm/_version.py`` as setuptools-scm writes
    it, and the dist-info (METADATA, WHEEL, entry_points.txt, RECORD). Used as
    ``--base-wheel`` for overlay builds in the demo and the tests.
    """
    import base64
    import hashlib
    import zipfile

    from packaging.version import Version

    from forkpatch.git import git_env

    version = version or tag.lstrip("v")
    listing = _git(fork, "ls-tree", "-r", "--name-only", "-z", tag)
    members: list[tuple[str, bytes]] = []
    for rel in sorted(p for p in listing.split("\0") if p):
        if rel.startswith("vllm/") and rel.endswith(".py"):
            data = subprocess.run(
                ["git", "-C", str(fork), "cat-file", "blob", f"{tag}:{rel}"],
                check=True,
                env=git_env(),
                stdout=subprocess.PIPE,
            ).stdout
            members.append((rel, data))
    parts = Version(version).release
    members.append(
        (
            "vllm/_version.py",
            f"__version__ = version = {version!r}\n"
            f"__version_tuple__ = version_tuple = {parts!r}\n".encode(),
        )
    )
    di = f"1cat_vllm-{version}.dist-info"
    members.append(
        (
            f"{di}/METADATA",
            (
                "Metadata-Version: 2.1\nName: 1cat-vllm\n"
                f"Version: {version}\nSummary: 1Cat-vLLM (example)\n"
            ).encode(),
        )
    )
    members.append(
        (
            f"{di}/WHEEL",
            (
                b"Wheel-Version: 1.0\nGenerator: forkpatch-example\n"
                b"Root-Is-Purelib: true\nTag: py3-none-any\n"
            ),
        )
    )
    members.append(
        (f"{di}/entry_points.txt", b"[console_scripts]\nvllm = vllm.entrypoints.cli.main:main\n")
    )
    members.append((f"{di}/top_level.txt", b"vllm\n"))
    record = []
    for name, data in members:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{di}/RECORD,,")
    members.append((f"{di}/RECORD", ("\n".join(record) + "\n").encode()))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"1cat_vllm-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members:
            info = zipfile.ZipInfo(name, date_time=(2026, 6, 23, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return path
