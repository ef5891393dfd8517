"""The wheelhouse a GPU machine without network needs for ``forkpatch smoke --tier
gpu-jit``: the wheels' requirements that the machine lacks, resolved for *its* Python and
platform (``pip download --no-deps`` one at a time, each one's own requirements followed),
skipping what its ``pip list --format=freeze`` already satisfies, within a size bound (a
lent machine takes a bounded carry). ``ci/gpu-jit-bundle.sh`` drives it, with the PTX
library and the fork's wheel of the machine's Python tag.

Command line: ``python -m forkpatch.smoke.bundle --wheel W [--wheel W ...] --have FREEZE
--python-version 3.12 --out DIR [--max-mib N]``; prints one line per wheel it saved.
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from collections.abc import Iterable, Sequence
from email.parser import BytesHeaderParser
from pathlib import Path

from packaging.markers import InvalidMarker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from forkpatch.errors import BuildError, ForkpatchError
from forkpatch.escape import terminal

#: The manylinux tags pip matches exactly (--platform): those a current x86-64 Linux takes.
PLATFORMS = (
    *(f"manylinux_2_{n}_x86_64" for n in range(39, 4, -1)),
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
)
FREEZE_MAX_BYTES = 1 << 20
MAX_DOWNLOADS = 400
DOWNLOAD_TIMEOUT_S = 600.0


def read_freeze(path: Path) -> dict[str, str]:
    """Canonical name -> version from ``pip list --format=freeze`` (or ``pip freeze``)
    output; other lines (editable installs, comments) are ignored."""
    try:
        raw = path.read_bytes()[: FREEZE_MAX_BYTES + 1]
    except OSError as exc:
        raise BuildError(f"{path}: cannot read it ({exc.strerror})") from None
    if len(raw) > FREEZE_MAX_BYTES:
        raise BuildError(f"{path}: over {FREEZE_MAX_BYTES} bytes: not a package list")
    have: dict[str, str] = {}
    for line in raw.decode("utf-8", "replace").splitlines():
        name, sep, version = line.strip().partition("==")
        if sep and name and version and " " not in name:
            have[canonicalize_name(name)] = version.strip()
    if not have:
        raise BuildError(
            f"{path}: no `name==version` line",
            tip="on the GPU machine: python3 -m pip list --format=freeze > FILE",
        )
    return have


def marker_env(python_version: str) -> dict[str, str]:
    """The environment markers of a CPython ``python_version`` on x86-64 Linux."""
    return {
        "python_version": ".".join(python_version.split(".")[:2]),
        "python_full_version": python_version
        if python_version.count(".") == 2
        else python_version + ".0",
        "implementation_name": "cpython",
        "implementation_version": python_version,
        "platform_python_implementation": "CPython",
        "os_name": "posix",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "platform_release": "",
        "platform_version": "",
    }


def wheel_requires(wheel: Path) -> list[str]:
    """The Requires-Dist lines of ``wheel``'s METADATA."""
    with zipfile.ZipFile(wheel) as zf:
        names = [
            n for n in zf.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1
        ]
        if not names:
            raise BuildError(f"{wheel.name}: no .dist-info/METADATA")
        headers = BytesHeaderParser().parsebytes(zf.read(names[0]))
    return [str(v) for v in headers.get_all("Requires-Dist") or []]


def _wheel_name(path: Path) -> str | None:
    try:
        return str(parse_wheel_filename(path.name)[0])
    except InvalidWheelFilename:
        return None


def _applies(req: Requirement, env: dict[str, str], extras: Iterable[str]) -> bool:
    if req.marker is None:
        return True
    try:
        return any(req.marker.evaluate({**env, "extra": e}) for e in (*extras, ""))
    except InvalidMarker:
        return False


def resolve(
    wheels: Sequence[Path],
    have: dict[str, str],
    *,
    python_version: str,
    dest: Path,
    keep: Iterable[str] = (),
    pip: Sequence[str] = (sys.executable, "-m", "pip"),
) -> list[Path]:
    """Download into ``dest`` every requirement of ``wheels`` (and theirs, transitively)
    that ``have`` does not satisfy, for CPython ``python_version`` on x86-64 Linux,
    binary wheels only (``keep``: names whose installed version is taken whatever the
    requirement); the wheels saved, in the order they were resolved."""
    env = marker_env(python_version)
    dest.mkdir(parents=True, exist_ok=True)
    own = {canonicalize_name(n) for w in wheels if (n := _wheel_name(w))}
    queue: list[tuple[str, tuple[str, ...]]] = [(r, ()) for w in wheels for r in wheel_requires(w)]
    seen: dict[str, tuple[Path, set[str]]] = {}  # name -> its wheel, the extras asked for
    kept = {canonicalize_name(n) for n in keep}
    saved: list[Path] = []
    while queue:
        text, extras = queue.pop(0)
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if not _applies(req, env, extras):
            continue
        name = canonicalize_name(req.name)
        if name in own or name in kept:
            continue
        if name in seen:
            # Resolved already; a requirement naming extras not asked for before brings
            # what those extras require (mistral_common asks pydantic-extra-types[pycountry]
            # after fastapi[standard] asked for plain pydantic-extra-types).
            new = set(req.extras) - seen[name][1]
            if new:
                seen[name][1].update(new)
                queue.extend((r, tuple(new)) for r in _extra_requires(seen[name][0], new))
            continue
        got = have.get(name)
        if got is not None and (not req.specifier or req.specifier.contains(got, prereleases=True)):
            continue
        if len(seen) >= MAX_DOWNLOADS:
            raise BuildError(f"over {MAX_DOWNLOADS} packages to download: stopped")
        spec = f"{req.name}{req.specifier}"
        wheel = _download(spec, name, python_version, dest, pip)
        seen[name] = (wheel, set(req.extras))
        saved.append(wheel)
        queue.extend((r, tuple(req.extras)) for r in wheel_requires(wheel))
    return saved


def _extra_requires(wheel: Path, extras: Iterable[str]) -> list[str]:
    """The requirements of ``wheel`` that only ``extras`` bring (marker names one)."""
    out = []
    for text in wheel_requires(wheel):
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.marker is not None and "extra" in str(req.marker):
            out.append(text)
    return [t for t in out if any(f'"{e}"' in t or f"'{e}'" in t for e in extras)]


def _download(spec: str, name: str, python_version: str, dest: Path, pip: Sequence[str]) -> Path:
    cmd = [*pip, "download", "--no-deps", "--only-binary=:all:", "--quiet"]
    cmd += ["--python-version", python_version, "--implementation", "cp"]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    cmd += ["-d", str(dest), spec]
    from forkpatch import proc as programs

    try:
        done = programs.run(cmd, timeout=DOWNLOAD_TIMEOUT_S)
    except OSError as exc:
        raise BuildError(f"cannot run {cmd[0]}: {exc}") from None
    if done.returncode != 0 or done.timed_out:
        raise BuildError(
            f"pip download {spec} for CPython {python_version} failed:\n"
            + terminal(done.output.strip()[-1500:]),
            tip="check the name and that a binary wheel exists for that Python",
        )
    found = [p for p in dest.glob("*.whl") if _wheel_name(p) == name]
    if not found:
        raise BuildError(f"pip download {spec} saved no wheel of {name} in {dest}")
    return max(found, key=lambda p: p.stat().st_mtime)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m forkpatch.smoke.bundle")
    parser.add_argument("--wheel", type=Path, action="append", required=True)
    parser.add_argument("--have", type=Path, required=True, help="the machine's pip freeze")
    parser.add_argument("--python-version", required=True, help="the machine's Python, e.g. 3.12")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--max-mib", type=float, default=None, help="refuse a larger wheelhouse")
    parser.add_argument(
        "--keep-installed",
        action="append",
        default=[],
        metavar="NAME",
        help="take the machine's version of NAME whatever the requirement says "
        "(e.g. numpy, which torch there was built against)",
    )
    args = parser.parse_args(argv)
    try:
        have = read_freeze(args.have)
        for name in args.keep_installed:
            if canonicalize_name(name) not in have:
                raise BuildError(f"--keep-installed {name}: {args.have} does not list it")
        keep = {canonicalize_name(n) for n in args.keep_installed}
        saved = resolve(
            args.wheel,
            have,
            keep=keep,
            python_version=args.python_version,
            dest=args.out,
        )
        total = sum(p.stat().st_size for p in saved)
        for p in saved:
            print(terminal(f"{p.stat().st_size / 2**20:7.2f} MiB  {p.name}"))
        print(terminal(f"{len(saved)} wheel(s), {total / 2**20:.1f} MiB"), file=sys.stderr)
        if args.max_mib is not None and total > args.max_mib * 2**20:
            raise BuildError(
                f"the wheelhouse is {total / 2**20:.1f} MiB, over --max-mib {args.max_mib:g}"
            )
    except ForkpatchError as exc:
        print(terminal(f"error: {exc}"), file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
