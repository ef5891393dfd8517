"""Shared test helpers (importable as `fptest`): scratch git repos, the CLI runner, snapshots.

Kept out of conftest.py on purpose: several test directories have their own
conftest.py, and `from conftest import ...` would pick whichever came first."""

from __future__ import annotations

import contextlib
import os
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from forkpatch.cli import main as cli_main
from forkpatch.git import DIFF_OPTIONS

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Test Author",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
    "GIT_AUTHOR_DATE": "2026-06-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-06-01T00:00:00Z",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


class ScratchRepo:
    """A real git repository for tests: add_file / commit / tag helpers."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str, input: bytes | None = None) -> str:
        env = {**os.environ, **GIT_ENV}
        for k in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
            env.pop(k, None)
        return (
            subprocess.run(
                ["git", "-C", str(self.path), *args],
                check=True,
                env=env,
                input=input,
                capture_output=True,
            )
            .stdout.decode()
            .strip()
        )

    def add_file(self, rel: str, content: str | bytes, mode: int | None = None) -> Path:
        p = self.path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            content = content.encode()
        p.write_bytes(content)
        if mode is not None:
            p.chmod(mode)
        return p

    def remove_file(self, rel: str) -> None:
        (self.path / rel).unlink()

    def read(self, rel: str) -> bytes:
        return (self.path / rel).read_bytes()

    def commit(self, message: str = "change") -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")

    def tag(self, name: str, ref: str = "HEAD") -> str:
        self.git("tag", "-a", name, "-m", name, ref)
        return self.git("rev-parse", f"{name}^{{commit}}")

    def rev(self, ref: str) -> str:
        return self.git("rev-parse", ref)


class Runner:
    """Runs the forkpatch CLI in-process in a project directory."""

    def __init__(self, cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.cwd = cwd
        self.capsys = capsys

    def __call__(self, *args: str, expect: int | None = 0) -> tuple[int, str, str]:
        self.capsys.readouterr()
        old = Path.cwd()
        os.chdir(self.cwd)
        try:
            code = cli_main(list(args))
        finally:
            os.chdir(old)
        out, err = self.capsys.readouterr()
        if expect is not None:
            assert code == expect, (
                f"forkpatch {' '.join(args)} -> {code}\nstdout:{out}\nstderr:{err}"
            )
        return code, out, err


def snapshot(project: Path) -> dict[str, bytes]:
    """Bytes of series.yaml and every file in patches/ (to assert nothing changed)."""
    out = {"series.yaml": (project / "series.yaml").read_bytes()}
    for p in sorted((project / "patches").rglob("*")):
        if p.is_file():
            out[str(p.relative_to(project))] = p.read_bytes()
    return out


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


def _plain_git(repo: Path, *args: str) -> bytes:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "core.autocrlf=false", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    ).stdout


def git_diff(
    tmp: Path,
    before: dict[str, bytes],
    after: dict[str, bytes],
    modes: dict[str, int] | None = None,
) -> bytes:
    """The forkpatch-canonical diff (diff-tree, full index, binary, -M) between two trees."""
    repo = tmp / "repo"
    repo.mkdir()
    _plain_git(repo, "init", "-q")

    def commit(files: dict[str, bytes], chmod: dict[str, int]) -> str:
        for p in _plain_git(repo, "ls-files", "-z").split(b"\0"):
            if p:
                os.unlink(repo / os.fsdecode(p))
        for path, content in files.items():
            full = repo / path
            full.parent.mkdir(parents=True, exist_ok=True)
            full.write_bytes(content)
            os.chmod(full, chmod.get(path, 0o644))
        _plain_git(repo, "add", "-A")
        _plain_git(repo, "commit", "-q", "--allow-empty", "-m", "x")
        return _plain_git(repo, "rev-parse", "HEAD").decode().strip()

    a = commit(before, {})
    b = commit(after, modes or {})
    return _plain_git(repo, "diff-tree", *DIFF_OPTIONS, a, b)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def serve_pypiserver(
    root: Path, options: list[str], *, log: Path | None = None, ready_path: str = "simple/"
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """pypiserver on 127.0.0.1 (a free port) serving ``root`` with ``options`` (auth,
    ...); yields (url, process) once ``ready_path`` answers, stops it afterwards."""
    import sys
    import time
    import urllib.request

    port = free_port()
    out = open(log, "wb") if log else subprocess.DEVNULL
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pypiserver",
            "run",
            "-i",
            "127.0.0.1",
            "-p",
            str(port),
            *options,
            str(root),
        ],
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url + ready_path, timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        "pypiserver did not start" + (f": {log.read_text()}" if log else "")
                    ) from None
                time.sleep(0.2)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        if log:
            out.close()  # type: ignore[union-attr]
