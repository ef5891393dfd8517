"""Smoke checks that read the wheel on the host: the GPU architectures of its kernels.

``static.kernel-archs`` lists the SASS and PTX architectures of every compiled
module in the wheel (:mod:`forkpatch.wheels.fatbin`) and fails when a module
with CUDA code lacks ``sm_70`` SASS: the fork's CMake leaves 7.0 out of the
architecture list with CUDA 13 or newer, without an error, and such a wheel
cannot run its kernels on a V100 (PTX of a newer architecture does not JIT
down to 7.0). A Python-only wheel carries no kernels: the check is not
applicable there, and the report says so instead of passing it. A module that
cannot be read (damaged, compressed in a way this Python cannot read, too slow to
read) is "cannot tell": the check fails naming it and why, and is never dropped as
not applicable. The detail lists what each module carries, or why it could not be
read; the terminal report prints it.

These checks run in the forkpatch process, before the smoke environment; the
registry (:mod:`forkpatch.smoke.checks`) lists them with the in-environment ones.
"""

from __future__ import annotations

import functools
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from forkpatch.kinds import Tier
from forkpatch.smoke.incheck import ERROR, FAILED, NOT_RUN, PASSED
from forkpatch.smoke.report import CheckResult
from forkpatch.wheels.fatbin import ModuleArchs
from forkpatch.wheels.fatbin import wheel_archs as _read_wheel

KERNEL_ARCHS = "static.kernel-archs"
REQUIRED_SASS = 70


@dataclass(frozen=True)
class HostCheck:
    id: str
    tier: Tier
    summary: str
    func: Callable[[Path], tuple[str, str]]  # wheel -> (outcome, detail)
    baseline: bool = True

    def applicable(self, wheel: Path) -> str | None:
        """Why the check does not apply to ``wheel`` (None: it does)."""
        if self.id == KERNEL_ARCHS:
            try:
                modules, unreadable = wheel_archs(wheel)
            except (OSError, zipfile.BadZipFile):
                return None  # it applies; running it reports why the wheel cannot be read
            if not any(m.is_cuda for m in modules) and not unreadable:
                return not_applicable_reason(len(modules))
        return None


@functools.lru_cache(maxsize=4)
def _archs_of(path: str, mtime_ns: int, size: int) -> tuple[list[ModuleArchs], list[str]]:
    return _read_wheel(Path(path))


def wheel_archs(wheel: Path) -> tuple[list[ModuleArchs], list[str]]:
    """What the wheel's modules carry, read once for the applicability test and the
    check both (keyed by the file's path, time and size)."""
    st = wheel.stat()
    modules, unreadable = _archs_of(str(wheel.resolve()), st.st_mtime_ns, st.st_size)
    return list(modules), list(unreadable)


def _cannot_tell(unreadable: str) -> str:
    name, _, why = unreadable.partition(": ")
    return f"{name}: cannot tell what it carries ({why})"


def _brief(lines: Sequence[str], most: int = 3) -> str:
    """The first ``most`` module lines, for the detail's first line (the one the terminal
    report prints): what each carries or why it could not be read."""
    more = f"; {len(lines) - most} more below" if len(lines) > most else ""
    return " [" + "; ".join(lines[:most]) + more + "]"


def not_applicable_reason(n_modules: int) -> str:
    what = (
        "no compiled modules (a Python-only wheel)"
        if n_modules == 0
        else f"{n_modules} compiled module(s), none with CUDA code"
    )
    return f"not applicable: the wheel has {what}, so no kernel architectures to check"


def kernel_archs(wheel: Path) -> tuple[str, str]:
    """Every compiled module's SASS/PTX architectures; failed without sm_70 SASS."""
    modules, unreadable = wheel_archs(wheel)
    cuda = [m for m in modules if m.is_cuda]
    lines = [m.describe() for m in modules]
    lines += [_cannot_tell(u) for u in unreadable]
    if not cuda and not unreadable:
        return NOT_RUN, not_applicable_reason(len(modules))
    missing = [m for m in cuda if REQUIRED_SASS not in m.sass]
    if missing or unreadable:
        head = []
        if missing:
            head.append(
                f"{len(missing)} of {len(cuda)} CUDA module(s) carry no sm_{REQUIRED_SASS} SASS "
                f"({', '.join(m.path for m in missing[:5])}"
                + (" ..." if len(missing) > 5 else "")
                + "): their kernels cannot run on a compute capability "
                f"{REQUIRED_SASS // 10}.{REQUIRED_SASS % 10} GPU (build with "
                "TORCH_CUDA_ARCH_LIST including 7.0 and a CUDA older than 13)"
                + _brief([m.describe() for m in missing])
            )
        if unreadable:
            head.append(
                f"{len(unreadable)} compiled module(s) could not be read, so whether they "
                f"carry sm_{REQUIRED_SASS} SASS cannot be told"
                + _brief([_cannot_tell(u) for u in unreadable])
            )
        return FAILED, "; ".join(head) + "\n" + "\n".join(lines)
    return PASSED, (
        f"{len(cuda)} CUDA module(s), all with sm_{REQUIRED_SASS} SASS"
        + _brief([m.describe() for m in cuda])
        + "\n"
        + "\n".join(lines)
    )


HOST_CHECKS: dict[str, HostCheck] = {
    KERNEL_ARCHS: HostCheck(
        KERNEL_ARCHS,
        "static",
        "Every CUDA module in the wheel carries sm_70 SASS (read from its ELF .nv_fatbin "
        "section: SASS and PTX architectures listed).",
        kernel_archs,
    ),
}


def host_not_applicable(
    plan: Mapping[str, Sequence[str]], wheel: Path, *, explicit: Sequence[str] = ()
) -> dict[str, str]:
    """The host checks in ``plan`` that only the baseline put there and that do not apply
    to ``wheel``, with the reason (the report names them in its notes). A check a patch
    or the caller asked for stays in the plan, and reports not-run with that reason."""
    out = {}
    for cid, patches in plan.items():
        check = HOST_CHECKS.get(cid)
        if check is None or patches or cid in explicit:
            continue
        why = check.applicable(wheel)
        if why is not None:
            out[cid] = why
    return out


def run_host_checks(
    to_run: Sequence[str], wheel: Path, plan: Mapping[str, Sequence[str]]
) -> dict[str, CheckResult]:
    """Run the host checks among ``to_run`` on ``wheel``."""
    out = {}
    for cid in to_run:
        check = HOST_CHECKS.get(cid)
        if check is None:
            continue
        t0 = time.monotonic()
        try:
            outcome, detail = check.func(wheel)
        except (OSError, zipfile.BadZipFile) as exc:
            outcome, detail = ERROR, f"cannot read {wheel.name}: {exc}"
        out[cid] = CheckResult.of(
            cid, check.tier, outcome, time.monotonic() - t0, detail, list(plan.get(cid, []))
        )
    return out
