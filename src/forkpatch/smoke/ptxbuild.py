"""The fork's SM70 FP8 kernels as one compute_70 PTX library, for the gpu-jit smoke tier.

The fork's TurboMind SM70 units (the ``VLLM_SM70_TURBOMIND_SRCS`` list of its
CMakeLists.txt, read at the commit being built, less the torch op glue
``ops/awq_sm70_gemm.cu``) are compiled with a CUDA 12 ``nvcc`` to
``compute_70`` PTX only, so that the driver of any NVIDIA GPU of capability 7.0
or newer JIT-compiles them for itself. They are linked with forkpatch's own C
interface (``forkpatch/data/sm70ptx/fp8_capi.cu``: no torch header, loaded with ctypes and
registered under the fork's op schemas by the gpu-jit tier), the CUDA runtime
statically, and ``--wrap=cudaGetDeviceProperties_v2`` (TurboMind registers its
kernels only on a device that reports 7.x; the wrap reports 7.0 with the
device's own SM count and shared-memory limits).

The fork's sources are read from the fork repository at build time
(``git archive``) and never copied into this project. The output is cached by
fork commit, compiler and interface source: ``<cache>/<key>/`` holds the
library and ``manifest.json``; the fork's objects are kept under
``<cache>/objects/`` (by fork commit, compiler and flags) as they are built, so
an interrupted build resumes and a change of the interface recompiles one file.

Command line: ``python -m forkpatch.smoke.ptxbuild --fork-repo GIT_DIR
--commit REV --nvcc NVCC [--cache DIR] [--jobs N]``; prints the library's path.
``ci/sm70-ptx-lib.sh`` sets up Debian's CUDA 12.4 compiler and calls it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from forkpatch.errors import BuildError, ForkpatchError
from forkpatch.escape import terminal
from forkpatch.fsutil import atomic_write
from forkpatch.git import Git

SOURCES_VAR = "VLLM_SM70_TURBOMIND_SRCS"
#: The fork's torch op glue: replaced by forkpatch's C interface (see the module doc).
TORCH_GLUE = "csrc/sm70_turbomind/ops/awq_sm70_gemm.cu"
#: TurboMind's include root (the fork's VLLM_SM70_TURBOMIND_INCLUDE_DIRS).
INCLUDE_ROOT = "csrc/sm70_turbomind/lmdeploy"
SOURCES_ROOT = "csrc/sm70_turbomind"
#: What is read from the fork: its csrc/ (TurboMind's epilogue includes a header there).
ARCHIVE_ROOT = "csrc"
LIBRARY_NAME = "libforkpatch_sm70_fp8.so"
#: The test-only build with the fault switch (fp8_capi.cu's FORKPATCH_PTX_FAULT), for the
#: negative controls: a name of its own, so that it is never taken for the plain one.
FAULT_LIBRARY_NAME = "libforkpatch_sm70_fp8-faults.so"
FAULT_DEFINE = "-DFPSM70_FAULT_SWITCH=1"
MANIFEST_NAME = "manifest.json"
CAPI_SOURCE = "fp8_capi.cu"
#: PTX for compute capability 7.0 and nothing else: no SASS for any GPU.
GENCODE = ("-gencode", "arch=compute_70,code=compute_70")
WRAPPED = "cudaGetDeviceProperties_v2"
NVCC_FLAGS = (
    "-std=c++17",
    "-O3",
    "-Xcompiler=-fPIC",
    "--expt-relaxed-constexpr",
    "--expt-extended-lambda",
    # (not torch's __CUDA_NO_HALF_OPERATORS__ family: TurboMind's converters use them)
    "-DENABLE_SM70_TURBOMIND=1",
    *GENCODE,
)
LINK_FLAGS = ("-shared", "-cudart", "static", f"-Xlinker=--wrap={WRAPPED}", *GENCODE)

_SET_RE = re.compile(r"\bset\(\s*([A-Za-z_][A-Za-z0-9_]*)\s+([^()]*?)\)", re.S)
_TOKEN_RE = re.compile(r'"([^"]*)"|([^\s"]+)')
_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_RELEASE_RE = re.compile(r"release (\d+)\.(\d+), V(\d+\.\d+\.\d+)")


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def turbomind_sources(cmake: str, where: str = "CMakeLists.txt") -> tuple[str, ...]:
    """The fork's SM70 TurboMind units (paths in the fork's tree), from the
    ``set(VLLM_SM70_TURBOMIND_SRCS ...)`` of its CMakeLists.txt; the torch op glue
    is left out. Variables are resolved from the file's own single-valued
    ``set(NAME "value")`` lines (``CMAKE_CURRENT_LIST_DIR`` being the tree's root)."""
    values: dict[str, str] = {}
    found: tuple[int, list[str]] | None = None
    for match in _SET_RE.finditer(cmake):
        name, body = match.group(1), match.group(2)
        tokens = [a if a else b for a, b in _TOKEN_RE.findall(body)]
        if name == SOURCES_VAR:
            found = (match.start(), tokens)
        elif len(tokens) == 1:
            values.setdefault(name, tokens[0])
    if found is None:
        raise BuildError(
            f"{where}: no set({SOURCES_VAR} ...): this fork commit has no SM70 TurboMind build",
            tip="build the PTX library from a commit of the fork that has csrc/sm70_turbomind "
            "(the series' base, v1.2.1, does)",
        )
    start, tokens = found
    line = _line_of(cmake, start)

    def resolve(text: str, depth: int = 0) -> str:
        def one(m: re.Match[str]) -> str:
            var = m.group(1)
            if var == "CMAKE_CURRENT_LIST_DIR":
                return ""
            if var not in values or depth > 8:
                raise BuildError(
                    f"{where}:{line}: {SOURCES_VAR} names ${{{var}}}, which the file does not "
                    "set to one value",
                    tip="the fork changed how it lists its SM70 sources: update "
                    "forkpatch.smoke.ptxbuild.turbomind_sources",
                )
            return resolve(values[var], depth + 1)

        return _VAR_RE.sub(one, text)

    sources = []
    for token in tokens:
        path = resolve(token).lstrip("/")
        if not path.startswith(SOURCES_ROOT + "/") or ".." in path.split("/"):
            raise BuildError(
                f"{where}:{line}: {SOURCES_VAR} lists {token!r} ({path!r}), outside {SOURCES_ROOT}/",
                tip="the fork moved its SM70 sources: update forkpatch.smoke.ptxbuild",
            )
        if path != TORCH_GLUE:
            sources.append(path)
    if not sources:
        raise BuildError(f"{where}:{line}: {SOURCES_VAR} lists no source besides the op glue")
    return tuple(sources)


@dataclass(frozen=True)
class Compiler:
    nvcc: Path
    version: str  # "12.4.131"

    @property
    def ident(self) -> str:
        return f"nvcc{self.version}"


def compiler_of(nvcc: Path, version_text: str) -> Compiler:
    """The compiler, from ``nvcc --version``'s text; CUDA 13 and newer cannot emit
    compute_70 and are refused."""
    m = _RELEASE_RE.search(version_text)
    if m is None:
        raise BuildError(
            f"{nvcc}: cannot read a CUDA release from `nvcc --version`: {version_text.strip()[-200:]!r}",
            tip="pass the nvcc of a CUDA 12.x toolkit (ci/sm70-ptx-lib.sh sets one up)",
        )
    major = int(m.group(1))
    if major != 12:
        raise BuildError(
            f"{nvcc} is CUDA {m.group(1)}.{m.group(2)}: compute_70 PTX needs a CUDA 12.x compiler "
            "(CUDA 13 dropped Volta, CUDA 11 lacks the fork's FP8 types)",
            tip="pass the nvcc of a CUDA 12.x toolkit (ci/sm70-ptx-lib.sh sets one up)",
        )
    return Compiler(nvcc, m.group(3))


#: forkpatch's C interface over the fork's units (packaged with forkpatch's data).
CAPI_PATH = Path(__file__).resolve().parents[1] / "data" / "sm70ptx" / CAPI_SOURCE


def capi_source() -> bytes:
    return CAPI_PATH.read_bytes()


def _digest(*parts: bytes) -> str:
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:12]


def objects_key(fork_commit: str, compiler: Compiler) -> str:
    """Where the fork's objects are kept: fork commit, compiler and compile flags."""
    return f"{fork_commit[:12]}-{compiler.ident}-{_digest(*(f.encode() for f in NVCC_FLAGS))}"


def cache_key(
    fork_commit: str, compiler: Compiler, capi: bytes, *, fault_switch: bool = False
) -> str:
    """The library's cache entry: fork commit, compiler, flags and interface source."""
    flags = [f.encode() for f in (*NVCC_FLAGS, *LINK_FLAGS)]
    if fault_switch:
        flags.append(FAULT_DEFINE.encode())
    return f"{fork_commit[:12]}-{compiler.ident}-{_digest(capi, *flags)}"


def default_cache() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "forkpatch" / "sm70-ptx"


def _object_name(source: str) -> str:
    return source.removeprefix(SOURCES_ROOT + "/").replace("/", "__") + ".o"


def _extract(archive: Path, dest: Path) -> None:
    """Unpack ``git archive``'s tar of the fork: plain files and folders inside ``dest``."""
    with tarfile.open(archive) as tar:
        members = []
        for m in tar.getmembers():
            if m.name.startswith("/") or ".." in Path(m.name).parts:
                raise BuildError(f"the fork's archive holds {m.name!r}, outside its tree")
            if m.isfile() or m.isdir():  # the SM70 units include no linked file
                members.append(m)
        tar.extractall(dest, members=members)


def build_library(
    fork_repo: Path,
    rev: str,
    nvcc: Path,
    *,
    cache: Path | None = None,
    jobs: int = 2,
    fault_switch: bool = False,
) -> Path:
    """Build (or find in the cache) the PTX library of the fork at ``rev``; its path.
    ``fault_switch``: the test-only build whose FORKPATCH_PTX_FAULT makes it wrong on
    purpose (the gpu-jit tier's negative controls), under :data:`FAULT_LIBRARY_NAME`."""
    from forkpatch.wheels import runner

    git = Git(fork_repo)
    commit = git.commit_of(rev)
    if commit is None:
        raise BuildError(
            f"{fork_repo}: no commit {rev!r}", tip="fetch the fork's tags, or name another commit"
        )
    version = runner.run([nvcc, "--version"], what="ask nvcc its version").stdout
    compiler = compiler_of(nvcc, version)
    capi = capi_source()
    out = (cache or default_cache()) / cache_key(commit, compiler, capi, fault_switch=fault_switch)
    library = out / (FAULT_LIBRARY_NAME if fault_switch else LIBRARY_NAME)
    if library.is_file() and (out / MANIFEST_NAME).is_file():
        return library
    cmake = git.run("show", f"{commit}:CMakeLists.txt").stdout.decode("utf-8", "replace")
    sources = turbomind_sources(cmake, f"{rev}:CMakeLists.txt")
    out.mkdir(parents=True, exist_ok=True)
    objects = out.parent / "objects" / objects_key(commit, compiler)
    objects.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="forkpatch-sm70ptx-") as tmp:
        tree = Path(tmp)
        archive = tree / "src.tar"
        archive.write_bytes(git.run("archive", "--format=tar", commit, ARCHIVE_ROOT).stdout)
        _extract(archive, tree)
        (tree / CAPI_SOURCE).write_bytes(capi)
        units = [(tree / s, objects / _object_name(s)) for s in sources]
        units.append((tree / CAPI_SOURCE, out / "fp8_capi.o"))
        include = ["-I", str(tree / INCLUDE_ROOT)]

        def compile_one(unit: tuple[Path, Path]) -> None:
            src, obj = unit
            if obj.is_file():
                return
            part = obj.with_suffix(".o.part")
            define = [FAULT_DEFINE] if fault_switch and src.name == CAPI_SOURCE else []
            runner.run(
                [nvcc, *NVCC_FLAGS, *define, *include, "-c", src, "-o", part],
                what=f"compile {src.relative_to(tree)}",
            )
            part.replace(obj)

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for _ in pool.map(compile_one, units):
                pass
        part = out / (library.name + ".part")
        runner.run(
            [nvcc, *LINK_FLAGS, *(obj for _, obj in units), "-o", part],
            what="link the SM70 FP8 PTX library",
        )
        part.replace(library)
    manifest = {
        "fork_commit": commit,
        "compiler": compiler.ident,
        "gencode": list(GENCODE),
        "nvcc_flags": list(NVCC_FLAGS),
        "link_flags": list(LINK_FLAGS),
        "sources": list(sources),
        "interface": CAPI_SOURCE,
        "fault_switch": fault_switch,
        "library": library.name,
        "size": library.stat().st_size,
        "sha256": hashlib.sha256(library.read_bytes()).hexdigest(),
    }
    atomic_write(out / MANIFEST_NAME, (json.dumps(manifest, indent=2) + "\n").encode())
    return library


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m forkpatch.smoke.ptxbuild")
    parser.add_argument("--fork-repo", type=Path, required=True, help="the fork's git directory")
    parser.add_argument("--commit", default="v1.2.1", help="fork commit or tag (the series' base)")
    parser.add_argument("--nvcc", type=Path, help="a CUDA 12.x nvcc (not for --list-sources)")
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--list-sources", action="store_true", help="print the units to compile and stop"
    )
    parser.add_argument(
        "--fault-switch",
        action="store_true",
        help="the test-only build whose FORKPATCH_PTX_FAULT makes it wrong on purpose",
    )
    args = parser.parse_args(argv)
    try:
        if args.list_sources:
            git = Git(args.fork_repo)
            cmake = git.run("show", f"{args.commit}:CMakeLists.txt").stdout.decode()
            for source in turbomind_sources(cmake, f"{args.commit}:CMakeLists.txt"):
                print(source)
            return 0
        if args.nvcc is None:
            parser.error("--nvcc is required to build (ci/sm70-ptx-lib.sh finds one)")
        print(
            build_library(
                args.fork_repo,
                args.commit,
                args.nvcc,
                cache=args.cache,
                jobs=args.jobs,
                fault_switch=args.fault_switch,
            )
        )
    except ForkpatchError as exc:
        print(terminal(f"error: {exc}"), file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
