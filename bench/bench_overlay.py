"""Overlay build vs `wheel unpack`+`wheel pack` vs a Python-only source build.

Builds a wheel shaped like the fork's (~80 MB, ~2,500 members: Python
modules plus large incompressible "compiled" members), then times, in one
run, three ways of producing the same patched wheel (3 Python files changed,
new version):

  overlay      forkpatch.wheels.overlay.overlay_wheel (raw member copy)
  unpack+pack  `python -m wheel unpack`, edit, rename dist-info, `python -m wheel pack`
  source       `python -m build --wheel --no-isolation` of a generated setuptools
               project holding the same .py files (no compiled members: this is
               the lower bound of a real source build, which also compiles CUDA)

Run:  python bench/bench_overlay.py [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))  # the test helpers: tests/support

from forkpatch.wheels.dist_alias import add_vllm_dist_alias
from forkpatch.wheels.identity import (
    BuilderInfo,
    PatchRecord,
    Provenance,
    build_version,
    patchset_label,
)
from forkpatch.wheels.overlay import overlay_wheel, rewrite_metadata_version
from support import wheelfactory

CHANGED = ("vllm/pkg00/mod0000.py", "vllm/pkg01/mod0001.py", "vllm/pkg02/mod0002.py")


def run(cmd: list[str], cwd: Path | None = None) -> None:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if r.returncode:
        sys.exit(f"command failed: {shlex.join(cmd)}\n{r.stdout}\n{r.stderr}")


def timed(label: str, fn: Callable[[int], Path], repeat: int) -> tuple[list[float], Path]:
    times = []
    out = Path()
    for i in range(repeat):
        t0 = time.perf_counter()
        out = fn(i)
        times.append(time.perf_counter() - t0)
        print(
            f"  {label:<12} run {i + 1}: {times[-1]:8.3f} s  -> {out.name} "
            f"({out.stat().st_size / 1e6:.1f} MB)",
            flush=True,
        )
    return times, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="work in this directory and keep it")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-overlay-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"command: {shlex.join([sys.executable, *sys.argv])}")
    print(
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, "
        f"work dir {work}"
    )

    t0 = time.perf_counter()
    files = wheelfactory.realistic_files()
    base_dir = work / "base"
    base_dir.mkdir(exist_ok=True)
    # binaries deflated at zlib's default level, as setuptools/wheel write them
    base = wheelfactory.build_wheel(base_dir, files, binary_compresslevel=None, entry_points=None)
    n_py = sum(1 for f in files if f.endswith(".py"))
    print(
        f"base wheel: {base.name}, {base.stat().st_size / 1e6:.1f} MB, "
        f"{len(zipfile.ZipFile(base).namelist())} members ({n_py} .py), "
        f"generated in {time.perf_counter() - t0:.1f} s"
    )

    repl = {p: files[p] + b"\n# patched by bench\n" for p in CHANGED}
    label = patchset_label("0" * 40, [(p, d) for p, d in repl.items()])
    new_version = build_version("1.2.1", label)
    prov = Provenance(
        fork_url="https://github.com/1CatAI/1Cat-vLLM",
        tag="v1.2.1",
        commit="0" * 40,
        patches=(
            PatchRecord("bench", sha256="0" * 64),
            PatchRecord("vllm-dist-info", build_step="vllm-dist-info"),
        ),
        forkpatch_version="0.1.0",
        builder=BuilderInfo("overlay"),
    )

    # --- overlay
    def do_overlay(i: int) -> Path:
        d = work / f"overlay{i}"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir()
        return overlay_wheel(
            base,
            replacements=repl,
            new_version=new_version,
            provenance=prov,
            out_dir=d,
            extra_steps=[add_vllm_dist_alias],
        )

    # --- wheel unpack + edit + wheel pack
    py = sys.executable
    old_di = "1cat_vllm-1.2.1.dist-info"
    new_di = f"1cat_vllm-{new_version}.dist-info"
    unpack_cmd = [py, "-m", "wheel", "unpack", "-d", "<tmp>", str(base)]
    pack_cmd = [py, "-m", "wheel", "pack", "-d", "<out>", "<tmp>/1cat_vllm-1.2.1"]

    def do_unpack_pack(i: int) -> Path:
        tmp = work / f"unpack{i}"
        out = work / f"packed{i}"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        run([py, "-m", "wheel", "unpack", "-d", str(tmp), str(base)])
        root = tmp / "1cat_vllm-1.2.1"
        for p, data in repl.items():
            (root / p).write_bytes(data)
        (root / old_di).rename(root / new_di)
        meta = root / new_di / "METADATA"
        meta.write_bytes(rewrite_metadata_version(meta.read_bytes(), new_version, source="bench"))
        run([py, "-m", "wheel", "pack", "-d", str(out), str(root)])
        (whl,) = out.glob("*.whl")
        return whl

    # --- Python-only source build of an equivalent tree
    proj = work / "srcproj"
    shutil.rmtree(proj, ignore_errors=True)
    for p, data in files.items():
        if p.endswith(".py"):
            (proj / p).parent.mkdir(parents=True, exist_ok=True)
            (proj / p).write_bytes(repl.get(p, data))
    for d in {p.parent for p in proj.rglob("*.py")}:
        (d / "__init__.py").touch()
    (proj / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools", "wheel"]\n'
        'build-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "1cat-vllm"\nversion = "{new_version}"\n\n'
        '[tool.setuptools.packages.find]\ninclude = ["vllm*"]\n'
    )
    build_cmd = [py, "-m", "build", "--wheel", "--no-isolation", "--outdir", "<out>", str(proj)]

    def do_source(i: int) -> Path:
        out = work / f"built{i}"
        shutil.rmtree(out, ignore_errors=True)
        for stale in ("build", "1cat_vllm.egg-info"):
            shutil.rmtree(proj / stale, ignore_errors=True)
        run([py, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(proj)])
        (whl,) = out.glob("*.whl")
        return whl

    print("timed commands:")
    print("  overlay      : overlay_wheel(base, 3 replacements, extra_steps=[add_vllm_dist_alias])")
    print(
        f"  unpack+pack  : {shlex.join(unpack_cmd)} ; edit 3 files, rename dist-info, "
        f"rewrite METADATA ; {shlex.join(pack_cmd)}"
    )
    print(f"  source       : rm -rf build *.egg-info ; {shlex.join(build_cmd)}")
    results = {}
    for label_, fn in (
        ("overlay", do_overlay),
        ("unpack+pack", do_unpack_pack),
        ("source", do_source),
    ):
        results[label_] = timed(label_, fn, args.repeat)

    print()
    print(f"{'method':<12} {'min s':>8} {'median s':>9} {'max s':>8} {'MB':>7} {'vs overlay':>11}")
    base_med = statistics.median(results["overlay"][0])
    for label_, (times, out) in results.items():
        med = statistics.median(times)
        print(
            f"{label_:<12} {min(times):8.3f} {med:9.3f} {max(times):8.3f} "
            f"{out.stat().st_size / 1e6:7.1f} {med / base_med:10.1f}x"
        )
    ratio = statistics.median(results["unpack+pack"][0]) / base_med
    print(
        f"\noverlay is {ratio:.1f}x faster than wheel unpack+pack (target >= 20x): "
        f"{'MET' if ratio >= 20 else 'NOT MET'}"
    )
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
