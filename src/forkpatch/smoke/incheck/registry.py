"""The registry of checks and how one runs: ids and tiers, outcomes, :class:`Ctx`,
the device probe, the gate (why a check cannot run here) and :func:`run_one`; the
helpers every tier shares (lazy torch and vllm imports, missing modules)."""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import shutil
import subprocess
import sysconfig
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

# The one reach outside this package: the ids and tiers forkpatch's series validation
# reads too (the smoke venv gets a copy of the module, in the same place relative to
# this package).
from ...checkids import CHECK_IDS, TIERS

BLOCK = 128
# Qwen3.5's fused in_proj_qkvz per rank at TP4: (16,384 + 96) / 4.
ODD_WIDTH = 4120
SM70 = (7, 0)
PROVENANCE_FILENAME = "forkpatch-provenance.json"

# What each --tier runs: cumulative up to sm70; gpu-jit is its own tier beside sm70 (the
# fork's kernels as PTX on any GPU of capability 7.0 or newer), never a stand-in for it.
TIER_RUNS = {
    "static": ("static",),
    "gpu": ("static", "gpu"),
    "sm70": ("static", "gpu", "sm70"),
    "gpu-jit": ("static", "gpu", "gpu-jit"),
}
# The lowest capability whose driver can JIT-compile the library's compute_70 PTX.
JIT_MIN_CAPABILITY = (7, 0)

# Outcomes. "not-run" is never a pass: it always carries the reason.
PASSED, FAILED, NOT_RUN, ERROR = "passed", "failed", "not-run", "error"


class NotRun(Exception):
    """The check cannot run in this environment (the reason is the message)."""


@dataclass(frozen=True)
class CheckDef:
    id: str
    tier: str
    func: Callable[[Ctx], str | None]
    needs: tuple[str, ...] = ()  # "torch", "cuda", "sm70", "jit"
    baseline: bool = False
    summary: str = ""


REGISTRY: dict[str, CheckDef] = {}


def check(
    check_id: str, *, needs: tuple[str, ...] = (), baseline: bool = False
) -> Callable[[Callable[[Ctx], str | None]], Callable[[Ctx], str | None]]:
    """Register a check under ``check_id`` ("<tier>.<name>")."""
    tier, _, name = check_id.partition(".")
    if tier not in TIERS or not name:
        raise ValueError(f"check id {check_id!r} must be '<tier>.<name>' with tier in {TIERS}")
    if check_id not in CHECK_IDS:
        raise ValueError(f"check id {check_id!r} is not in checkids.CHECK_IDS: add it there")
    if tier in ("gpu", "sm70", "gpu-jit") and "cuda" not in needs:
        needs = (*needs, "cuda")
    if tier == "sm70" and "sm70" not in needs:
        needs = (*needs, "sm70")
    if tier == "gpu-jit" and "jit" not in needs:
        needs = (*needs, "jit")

    def deco(func: Callable[[Ctx], str | None]) -> Callable[[Ctx], str | None]:
        if check_id in REGISTRY:
            raise ValueError(f"check {check_id!r} registered twice")
        doc = (func.__doc__ or "").strip().split("\n\n")[0]
        REGISTRY[check_id] = CheckDef(
            check_id, tier, func, tuple(needs), baseline, " ".join(doc.split())
        )
        return func

    return deco


#: check id -> what starts a part of it when the check process starts (before the
#: checks run one after the other): a program of its own that the check then waits for.
EARLY: dict[str, Callable[[Ctx], Any]] = {}


def starts_early(check_id: str) -> Callable[[Callable[[Ctx], Any]], Callable[[Ctx], Any]]:
    """Register ``func(ctx)`` to start ``check_id``'s process early; the check finds
    what it returned in ``ctx.early[check_id]`` (absent: not started early)."""

    def deco(func: Callable[[Ctx], Any]) -> Callable[[Ctx], Any]:
        EARLY[check_id] = func
        return func

    return deco


def start_early(ids: list[str], ctx: Ctx) -> None:
    """Start the early part of each of ``ids`` that has one, unless it cannot run here
    (its gate) or cannot start (the check then starts it itself and says why)."""
    for cid in ids:
        defn = REGISTRY.get(cid)
        if cid not in EARLY or defn is None or gate(defn, ctx.device) is not None:
            continue
        with contextlib.suppress(Exception):
            ctx.early[cid] = EARLY[cid](ctx)


def run_order(ids: list[str], ctx: Ctx) -> list[str]:
    """The order this process runs ``ids`` in: a check whose process was started early
    (:func:`start_early`) waits for that process, so it comes after the checks of this
    process, which run while the other one does (each in the order given; the report
    lists them in the registry's order whatever the order they ran in)."""
    return [c for c in ids if c not in ctx.early] + [c for c in ids if c in ctx.early]


def finish_registry() -> None:
    """Once every tier's module has registered its checks: each id of the shared list has
    its check, and :data:`REGISTRY` runs and reports them in that list's order."""
    missing = [cid for cid in CHECK_IDS if cid not in REGISTRY]
    if missing:
        raise ImportError(f"checkids.CHECK_IDS names checks no module registers: {missing}")
    ordered = [REGISTRY.pop(cid) for cid in CHECK_IDS]
    REGISTRY.update((defn.id, defn) for defn in ordered)


@dataclass(frozen=True)
class Ctx:
    """What a check gets: the expectations the host computed, and the device facts."""

    spec: dict[str, Any]
    device: dict[str, Any] = field(default_factory=dict)
    #: What :func:`start_early` started, by check id.
    early: dict[str, Any] = field(default_factory=dict)

    @property
    def version(self) -> str:
        return str(self.spec["version"])

    @property
    def dist(self) -> str:
        return str(self.spec.get("dist", "1cat-vllm"))


# --------------------------------------------------------------------------- helpers


def site_dirs() -> list[str]:
    paths = sysconfig.get_paths()
    return sorted({os.path.realpath(paths["purelib"]), os.path.realpath(paths["platlib"])})


def is_inside(path: str, roots: list[str]) -> bool:
    real = os.path.realpath(path)
    return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def import_torch() -> Any:
    try:
        import torch
    except ModuleNotFoundError as exc:
        raise NotRun(missing_module_reason(exc.name or "torch")) from None
    except ImportError as exc:
        raise NotRun(f"torch is not importable in the smoke environment ({exc})") from None
    return torch


# Import name -> distribution name, where they differ (for the install command).
DISTRIBUTIONS = {
    "yaml": "pyyaml",
    "cv2": "opencv-python-headless",
    "PIL": "pillow",
    "zmq": "pyzmq",
    "cpuinfo": "py-cpuinfo",
    "google": "protobuf",
    "sklearn": "scikit-learn",
    "multipart": "python-multipart",
    "jose": "python-jose",
    "dateutil": "python-dateutil",
}


def is_third_party(module: str) -> bool:
    """A module the wheel does not provide itself (its absence is the environment's,
    not the wheel's, fault)."""
    top = module.split(".")[0]
    own = set(_SPEC.get("own_modules") or ("vllm",))
    return bool(top) and top not in own


_MISSING = "needs the module '{}', which is not installed in the smoke environment"
_MISSING_RE = re.compile(re.escape(_MISSING).replace(r"\{\}", "([A-Za-z0-9_]+)"))


def missing_module_reason(module: str) -> str:
    """Why a check cannot run without ``module``. How to install it is said once for
    the whole report, by the host (:func:`missing_modules` finds the module again)."""
    return _MISSING.format(module.split(".")[0])


def missing_modules(detail: str) -> list[str]:
    """The modules a not-run check's detail says it needs (see missing_module_reason)."""
    return list(dict.fromkeys(_MISSING_RE.findall(detail)))


@contextlib.contextmanager
def patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def import_vllm_module(name: str) -> Any:
    """Import a module of the wheel; a missing *third-party* dependency is NotRun."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and is_third_party(exc.name):
            raise NotRun(f"importing {name}: " + missing_module_reason(exc.name)) from None
        raise


_SPEC: dict[str, Any] = {}


def run_spec() -> dict[str, Any]:
    """The spec of this run (what main() read), which the checks and gates consult."""
    return _SPEC


# A process of its own running one module of this package (its main()), with the
# directory above the package's top put first on sys.path, so the package imports as
# it does here; in isolated mode (-I: no PYTHON* variables, no user site, no script or
# current directory on sys.path) that directory is the only one added.
_LAUNCH = (
    "import importlib, sys; sys.path.insert(0, sys.argv.pop(1)); "
    "sys.exit(importlib.import_module(sys.argv.pop(1)).main())"
)


def launch_argv(
    python: str, root: str, module: str, *args: str, isolated: bool = True
) -> list[str]:
    """The command that runs ``module``'s ``main()`` (``args`` in its sys.argv[1:])
    with ``python``, importing from ``root``."""
    return [python, *(["-I"] if isolated else []), "-c", _LAUNCH, root, module, *args]


def this_copy() -> tuple[str, str]:
    """Where this package runs from: the directory above its top package, and its name
    (forkpatch's source tree on the host, the copy in the smoke venv there)."""
    package = __package__ or __name__.rpartition(".")[0]
    root = os.path.abspath(__file__)
    for _ in range(package.count(".") + 2):
        root = os.path.dirname(root)
    return root, package


# --------------------------------------------------------------------------- device + runner


def probe_device() -> dict[str, Any]:
    """What the environment has: torch, CUDA devices (name, capability), driver."""
    info: dict[str, Any] = {
        "torch": None,
        "cuda_available": False,
        "devices": [],
        "driver": None,
        "torch_cuda": None,
        "reason": None,
    }
    try:
        import torch
    except ModuleNotFoundError as exc:
        info["reason"] = missing_module_reason(exc.name or "torch")
        return info
    except ImportError as exc:
        info["reason"] = f"torch is not importable in the smoke environment ({exc})"
        return info
    info["torch"] = torch.__version__
    info["torch_cuda"] = getattr(torch.version, "cuda", None)
    try:
        available = torch.cuda.is_available()
    except Exception as exc:
        info["reason"] = f"torch.cuda.is_available() raised {type(exc).__name__}: {exc}"
        return info
    if not available:
        info["reason"] = "no CUDA device: torch.cuda.is_available() is False" + (
            "" if info["torch_cuda"] else " (torch is a CPU-only build)"
        )
        return info
    info["cuda_available"] = True
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        info["devices"].append(
            {
                "index": i,
                "name": props.name,
                "capability": [props.major, props.minor],
                "memory_gib": round(props.total_memory / 2**30, 1),
            }
        )
    smi = shutil.which("nvidia-smi")
    if smi:
        with contextlib.suppress(Exception):
            out = subprocess.run(
                [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                timeout=30,
                check=False,
            )
            versions = sorted({ln.strip() for ln in out.stdout.decode().splitlines() if ln.strip()})
            info["driver"] = ", ".join(versions) or None
    return info


def gate(defn: CheckDef, device: dict[str, Any]) -> str | None:
    """Why ``defn`` cannot run with this ``device`` (None: it can)."""
    needs = set(defn.needs)
    if needs & {"torch", "cuda", "sm70", "jit"} and device.get("torch") is None:
        return device.get("reason") or "torch is not importable"
    if needs & {"cuda", "sm70", "jit"} and not device.get("cuda_available"):
        return device.get("reason") or "no CUDA device"
    if "jit" in needs:
        for d in device.get("devices", []):
            if tuple(d["capability"]) < JIT_MIN_CAPABILITY:
                return (
                    f"device {d['name']} has capability {tuple(d['capability'])}: the "
                    f"driver cannot JIT compute_70 PTX below {JIT_MIN_CAPABILITY}"
                )
        if not _SPEC.get("ptx_lib"):
            return "no PTX library given (forkpatch smoke --ptx-lib, built by ci/sm70-ptx-lib.sh)"
    if "sm70" in needs:
        for d in device.get("devices", []):
            cap = tuple(d["capability"])
            if cap != SM70:
                return f"device {d['name']} has capability {cap}, not (7, 0)"
    return None


def run_one(defn: CheckDef, ctx: Ctx) -> dict[str, Any]:
    start = time.monotonic()
    reason = gate(defn, ctx.device)
    if reason is not None:
        return {"id": defn.id, "outcome": NOT_RUN, "duration_s": 0.0, "detail": reason}
    try:
        detail = defn.func(ctx)
        outcome = PASSED
    except NotRun as exc:
        outcome, detail = NOT_RUN, str(exc)
    except ModuleNotFoundError as exc:
        # A module the environment lacks (torch, fastapi, ...) is not the wheel's
        # fault: the check could not run. One the wheel should provide is.
        if exc.name and is_third_party(exc.name):
            outcome, detail = NOT_RUN, missing_module_reason(exc.name)
        else:
            outcome = FAILED
            detail = f"the wheel lacks a module of its own: {exc}\n{_short_tb(exc)}"
    except AssertionError as exc:
        outcome = FAILED
        detail = str(exc) or "assertion failed: " + _short_tb(exc)
    except (AttributeError, ImportError) as exc:
        hook = absent_hook(exc)
        if hook is None:
            outcome = ERROR
            detail = f"{type(exc).__name__}: {exc}\n{_short_tb(exc)}"
        else:  # the evidence a check exists for: the patch is not (or not all) there
            outcome = FAILED
            detail = f"{HOOK_ABSENT}: {hook} ({exc})\n{_short_tb(exc)}"
    except Exception as exc:
        outcome = ERROR
        detail = f"{type(exc).__name__}: {exc}\n{_short_tb(exc)}"
    return {
        "id": defn.id,
        "outcome": outcome,
        "duration_s": round(time.monotonic() - start, 3),
        "detail": detail or "",
    }


HOOK_ABSENT = "the patch's hook is absent"
_CANNOT_IMPORT = re.compile(r"cannot import name '([\w.]+)' from '([\w.]+)'")


def _owner_module(obj: Any) -> str:
    if isinstance(obj, type(os)):
        return str(getattr(obj, "__name__", ""))
    if isinstance(obj, type):
        return str(getattr(obj, "__module__", "") or "")
    return str(getattr(type(obj), "__module__", "") or "")


def absent_hook(exc: BaseException) -> str | None:
    """The wheel's own name that ``exc`` says is missing (a module, class or object of
    the wheel without an attribute a patch adds; a name that cannot be imported from one
    of its modules), as ``module.Name.attr``; None for anything else."""
    if isinstance(exc, AttributeError):
        name = getattr(exc, "name", None)
        obj = getattr(exc, "obj", None)
        if name is None or obj is None:
            return None
        module = _owner_module(obj)
        if not module or is_third_party(module):
            return None
        if isinstance(obj, type(os)):
            return f"{module}.{name}"
        cls = obj if isinstance(obj, type) else type(obj)
        return f"{module}.{cls.__qualname__}.{name}"
    if isinstance(exc, ImportError) and not isinstance(exc, ModuleNotFoundError):
        m = _CANNOT_IMPORT.search(str(exc))
        if m is None or is_third_party(m.group(2)):
            return None
        return f"{m.group(2)}.{m.group(1)}"
    return None


def _short_tb(exc: BaseException, lines: int = 12) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return "\n".join(text.rstrip().splitlines()[-lines:])
