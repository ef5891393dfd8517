"""The static tier: the wheel as installed (where vllm comes from, its metadata, the
CLI, provenance) and the SM70 layer checks on the CPU stand-ins."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
import time

from . import standin
from .layers import (
    capability_floor_check,
    eager_block_cast_check,
    padding_helpers_check,
    sm70_linear_check,
    sm70_unsupported_k_check,
    sm70_warmup_check,
)
from .registry import (
    ODD_WIDTH,
    PROVENANCE_FILENAME,
    Ctx,
    NotRun,
    check,
    import_vllm_module,
    is_inside,
    is_third_party,
    missing_module_reason,
    site_dirs,
    starts_early,
)
from .sm70ops import reference_ops

# --------------------------------------------------------------------------- static tier


@check("static.installed-from-wheel", baseline=True)
def installed_from_wheel(ctx: Ctx) -> str:
    """vllm is imported from this environment's site-packages (never the source tree),
    installed as the wheel's distribution and version."""
    import importlib.metadata as md

    expected_prefix = ctx.spec.get("prefix")
    if expected_prefix:
        assert os.path.realpath(sys.prefix) == os.path.realpath(expected_prefix), (
            f"running in {sys.prefix}, not the smoke environment {expected_prefix}"
        )
    assert sys.prefix != sys.base_prefix, "not running inside a virtual environment"
    dist = md.distribution(ctx.dist)
    assert dist.version == ctx.version, (
        f"installed {ctx.dist} is {dist.version}, the wheel is {ctx.version}"
    )
    import vllm

    sites = site_dirs()
    assert vllm.__file__ and is_inside(vllm.__file__, sites), (
        f"vllm imported from {vllm.__file__}, not from {', '.join(sites)}"
    )
    forbidden = [os.path.realpath(p) for p in ctx.spec.get("forbidden_paths", [])]
    leaked = [p for p in sys.path if p and is_inside(p, forbidden)]
    assert not leaked, f"sys.path contains source-tree paths: {leaked}"
    return f"vllm from {os.path.dirname(vllm.__file__)}"


@check("static.version-metadata", baseline=True)
def version_metadata(ctx: Ctx) -> str:
    """importlib.metadata.version("vllm"), version("1cat-vllm") and vllm.__version__
    all equal the wheel's version."""
    import importlib.metadata as md

    got_dist = md.version(ctx.dist)
    try:
        got_vllm = md.version("vllm")
    except md.PackageNotFoundError:
        raise AssertionError(
            f'importlib.metadata.version("vllm") raises PackageNotFoundError '
            f"(the wheel is {ctx.dist} {ctx.version})"
        ) from None
    version_mod = import_vllm_module("vllm.version")
    got_attr = getattr(version_mod, "__version__", None)
    bad = {
        k: v
        for k, v in (
            ("version('vllm')", got_vllm),
            (f"version('{ctx.dist}')", got_dist),
            ("vllm.version.__version__", got_attr),
        )
        if v != ctx.version
    }
    assert not bad, (
        "; ".join(f"{k} is {v!r}" for k, v in bad.items()) + f", the wheel is {ctx.version!r}"
    )
    return ctx.version


@check("static.cli-version", baseline=True)
def cli_version(ctx: Ctx) -> str:
    """`vllm --version` (the installed console script) prints the wheel's version."""
    run = ctx.early.pop("static.cli-version", None) or start_cli_version(ctx)
    returncode, text = run.finish()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if returncode != 0:
        missing = _MISSING_MODULE.findall(text)
        if missing and is_third_party(missing[-1]):
            raise NotRun("`vllm --version`: " + missing_module_reason(missing[-1]))
        tail = "\n".join(lines[-8:])
        raise AssertionError(f"`vllm --version` exited {returncode}:\n{tail}")
    assert ctx.version in lines, (
        f"`vllm --version` printed {lines[-1] if lines else 'nothing'!r}, want {ctx.version!r}"
    )
    # The check itself only waits for the rest of a run that began with the process.
    ran = time.monotonic() - run.since
    return f"`vllm --version` -> {ctx.version}{run.how}; it ran {ran:.1f} s"


@starts_early("static.cli-version")
def start_cli_version(ctx: Ctx) -> VersionRun:
    """Start `vllm --version` in a process of its own (see :class:`VersionRun`)."""
    return VersionRun(ctx)


_NO_PLATFORM = "Failed to infer device type"
_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named ['\"]([\w.]+)['\"]")
VERSION_TIMEOUT_S = 300


class VersionRun:
    """One run of the installed `vllm` console script with ``--version``, started when
    the check process starts and read when the check's turn comes, so that its 10-50 s
    of imports (the fork's CLI imports every subcommand, benchmarks included, before it
    parses ``--version``) overlap the in-process checks.

    It needs a process of its own: what it proves is the console script as a user runs
    it (its launcher and interpreter, a fresh ``sys.path``, the CLI's parser built from
    scratch and its exit status), which no import in the check process can show (that
    process has stand-ins and mocked devices installed). Once is enough: without a CUDA
    device (and no ``+cpu`` build, vLLM then infers no platform and the CLI, which builds
    ``serve``'s defaults before parsing, cannot start) vLLM's own CPU platform is
    selected from the start through a platform plugin that exists only for this run."""

    def __init__(self, ctx: Ctx) -> None:
        self.since = time.monotonic()  # its check reports how long it ran, from here
        self.script = os.path.join(os.path.dirname(sys.executable), "vllm")
        self.how = ""
        self.missing: str | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self._dirs: list[tempfile.TemporaryDirectory[str]] = []
        if not os.path.exists(self.script):
            self.missing = f"the wheel installed no `vllm` console script ({self.script})"
            return
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        self.paths: list[str] = []
        names = standin.install()
        if names:  # the wheel's missing compiled extension, as in this process
            self.paths.append(self._tempdir("forkpatch-stand-in-"))
            standin.write_sitecustomize(self.paths[-1], names)
        # Without a CUDA device vLLM infers no platform (unless a platform plugin of the
        # environment's own answers): the CPU one is selected from the start, not after
        # a first run that failed. With another plugin installed it runs as it is, and
        # only if vLLM then infers no platform is it run again with the CPU one.
        self.may_retry = not ctx.device.get("cuda_available")
        if self.may_retry and not _platform_plugins():
            self._spawn(cpu_platform=True)
        else:
            self._spawn(cpu_platform=False)

    def _spawn(self, *, cpu_platform: bool) -> None:
        paths = list(self.paths)
        if cpu_platform:
            paths.append(self._tempdir("forkpatch-cpu-platform-"))
            write_cpu_platform_plugin(paths[-1])
            self.how = " (no CUDA device: vLLM's CPU platform selected by a platform plugin)"
            self.may_retry = False
        env = dict(self.env)
        if paths:
            env["PYTHONPATH"] = os.pathsep.join(paths)
        self.started = time.monotonic()
        self._out = tempfile.TemporaryFile()  # noqa: SIM115 - closed in _wait()
        self.proc = subprocess.Popen(
            [self.script, "--version"],
            stdin=subprocess.DEVNULL,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tempfile.gettempdir(),
        )

    def _tempdir(self, prefix: str) -> str:
        self._dirs.append(tempfile.TemporaryDirectory(prefix=prefix))
        return self._dirs[-1].name

    def _wait(self) -> tuple[int, str]:
        assert self.proc is not None
        try:
            left = VERSION_TIMEOUT_S - (time.monotonic() - self.started)
            try:
                self.proc.wait(timeout=max(left, 0.1))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(
                    f"`vllm --version` did not finish in {VERSION_TIMEOUT_S} s"
                ) from None
            size = self._out.seek(0, os.SEEK_END)
            self._out.seek(max(0, size - _OUTPUT_LIMIT))  # a traceback ends it
            return self.proc.returncode, self._out.read().decode("utf-8", "replace")
        finally:
            self._out.close()

    def finish(self) -> tuple[int, str]:
        """Its exit status and output (AssertionError: no script, or no end in time)."""
        try:
            if self.proc is None:
                raise AssertionError(self.missing)
            code, text = self._wait()
            if code != 0 and _NO_PLATFORM in text and self.may_retry:
                self._spawn(cpu_platform=True)
                code, text = self._wait()
            return code, text
        finally:
            for d in self._dirs:
                d.cleanup()


def _platform_plugins() -> list[str]:
    """The environment's own vLLM platform plugins (entry points, by name)."""
    import importlib.metadata as md

    try:
        return [ep.name for ep in md.entry_points(group="vllm.platform_plugins")]
    except Exception:
        return []


# `vllm --version` prints a line or two; of more (a traceback), the last this many bytes.
_OUTPUT_LIMIT = 1024 * 1024


def write_cpu_platform_plugin(directory: str) -> None:
    """A metadata-only distribution whose ``vllm.platform_plugins`` entry point
    answers ``vllm.platforms.cpu.CpuPlatform`` (vLLM's out-of-tree platform hook)."""
    info = os.path.join(directory, "forkpatch_smoke_cpu_platform-0.dist-info")
    os.makedirs(info)
    files = {
        os.path.join(
            info, "METADATA"
        ): "Metadata-Version: 2.1\nName: forkpatch-smoke-cpu-platform\nVersion: 0\n",
        os.path.join(info, "entry_points.txt"): "[vllm.platform_plugins]\n"
        "forkpatch_smoke_cpu = forkpatch_smoke_cpu_platform:activate\n",
        os.path.join(
            directory, "forkpatch_smoke_cpu_platform.py"
        ): 'def activate():\n    return "vllm.platforms.cpu.CpuPlatform"\n',
    }
    for path, text in files.items():
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)


@check("static.import-patched-modules", baseline=True)
def import_patched_modules(ctx: Ctx) -> str:
    """Every module the patches touch imports from the installed wheel."""
    modules = list(ctx.spec.get("modules") or ["vllm"])
    sites = site_dirs()
    for name in modules:
        mod = import_vllm_module(name)
        where = getattr(mod, "__file__", None)
        assert where and is_inside(where, sites), f"{name} imported from {where}, not the venv"
    return f"{len(modules)} module(s): {', '.join(modules)}"


@check("static.provenance", baseline=True)
def provenance(ctx: Ctx) -> str:
    """The installed dist-info carries the wheel's forkpatch provenance, byte for byte,
    and it matches the series (when the smoke run has one)."""
    import importlib.metadata as md

    problems = list(ctx.spec.get("provenance_problems") or [])
    want = ctx.spec.get("provenance_sha256")
    text = md.distribution(ctx.dist).read_text(PROVENANCE_FILENAME)
    if want is None:
        problems.insert(0, f"the wheel has no {PROVENANCE_FILENAME}: it was not built by forkpatch")
    elif text is None:
        problems.insert(0, f"the installed dist-info has no {PROVENANCE_FILENAME}")
    else:
        got = hashlib.sha256(text.encode("utf-8")).hexdigest()
        if got != want:
            problems.insert(
                0, f"installed {PROVENANCE_FILENAME} has sha256 {got}, the wheel's is {want}"
            )
    assert not problems, "; ".join(problems)
    return "provenance installed intact" + (
        " and matches the series" if ctx.spec.get("series_compared") else ""
    )


@check("static.capability-floor-cpu", needs=("torch",))
def capability_floor_cpu(ctx: Ctx) -> str:
    """capability-floor with the CPU stand-in SM70 ops and a mocked (7, 0) device:
    7.0 is admitted for fp8_per_block only, as the fork's switches allow."""
    return capability_floor_check(reference_ops())


@check("static.odd-width-padding-cpu", needs=("torch",))
def odd_width_padding_cpu(ctx: Ctx) -> str:
    """odd-width-padding helpers on CPU: 4,120 rows padded to 4,224 and sliced back,
    plus an odd-width layer with a bias through the stand-in SM70 linear."""
    ops = reference_ops()
    ops.install()
    first = padding_helpers_check(ops)
    return first + "; " + sm70_linear_check(ops, 264, 128, 4, bias=True)


@check("static.eager-block-cast-cpu", needs=("torch",))
def eager_block_cast_cpu(ctx: Ctx) -> str:
    """eager-block-cast: a mocked SM70 takes the eager cast, other devices the compiled one."""
    return eager_block_cast_check(reference_ops())


@check("static.packed-repack-cpu", needs=("torch",))
def packed_repack_cpu(ctx: Ctx) -> str:
    """packed-repack on CPU: the 4,120-row per-block FP8 linear is packed at load,
    dispatched to the (stand-in) SM70 GEMM and bit-exact against the float reference;
    a K the SM70 GEMM cannot take falls back to fp16 by name."""
    ops = reference_ops()
    a = sm70_linear_check(ops, ODD_WIDTH, 256, 3, bias=False)
    b = sm70_linear_check(ops, 512, 384, 5, bias=True)
    return f"{a}; {b}; {sm70_unsupported_k_check(ops)}"


@check("static.sm70-warmup-cpu", needs=("torch",))
def sm70_warmup_cpu(ctx: Ctx) -> str:
    """The fork's own SM70 warmup over patched layers (odd and 128-multiple widths,
    with and without a bias) with the CPU stand-in ops: it must not fail."""
    return sm70_warmup_check(reference_ops())
