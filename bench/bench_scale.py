"""Series of many patches: apply, a no-op export and a re-apply, with git process counts.

Once, on a 10,000-patch series a no-op ``export`` took 327 s and a
re-apply 514 s because both started git several times per patch. This bench builds
a synthetic fork and series of N patches (no network, a few seconds to generate),
then times, on one project:

1. ``forkpatch apply``            (the first apply: creates the work tree)
2. ``forkpatch export``           (no-op: nothing changed)
3. ``forkpatch apply``            (re-apply on the existing work tree)
4. ``forkpatch status``

and counts the git processes each command starts, through a ``git`` shim put first
on PATH that logs its arguments and then runs the real git. Figures: wall time, CPU
time (user+sys of forkpatch and every child) and the number of git processes, with
the count per patch; O(1) processes means the count does not grow with N.

    python bench/bench_scale.py --sizes 1000,10000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import sys
import time
from pathlib import Path

from common import DEFAULT_WORKDIR, bench_env, forkpatch_argv, git, machine_info, run, timed

FILES_PER_100 = 10  # patches per fork file: patch i edits file i // 10, line block i % 10
BLOCK = 8  # lines per block; each patch changes the middle line of its block


def _file_text(f: int) -> str:
    lines = []
    for b in range(FILES_PER_100):
        for k in range(BLOCK):
            lines.append(f"value_{f}_{b}_{k} = {f * 100 + b * 10 + k}\n")
    return "".join(lines)


def _patch_text(i: int) -> str:
    """A canonical git diff changing line 4 of block i % 10 of file i // 10."""
    f, b = divmod(i, FILES_PER_100)
    path = f"pkg/m{f // 100:03d}/f{f:05d}.py"
    start = b * BLOCK + 2  # 1-based: lines 2..7 of the block are shown (3 context each side)
    old = [f"value_{f}_{b}_{k} = {f * 100 + b * 10 + k}\n" for k in range(1, 8)]
    new = list(old)
    new[3] = f"value_{f}_{b}_4 = {f * 100 + b * 10 + 4}  # patch {i}\n"
    body = "".join(" " + ln for ln in old[:3]) + "-" + old[3] + "+" + new[3]
    body += "".join(" " + ln for ln in old[4:])
    return (
        f"Patch {i}: one line of {path}.\n\n"
        f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n"
        f"@@ -{start},7 +{start},7 @@\n{body}"
    )


def make_fork(dest: Path, n: int) -> Path:
    files = (n + FILES_PER_100 - 1) // FILES_PER_100
    fork = dest / "fork"
    fork.mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=fork)
    # fast-import: thousands of files in one process.
    stream = bytearray(b"commit refs/heads/main\ncommitter Bench <b@x> 1700000000 +0000\n")
    stream += b"data 5\nfork\n"
    for f in range(files):
        data = _file_text(f).encode()
        stream += f"M 100644 inline pkg/m{f // 100:03d}/f{f:05d}.py\ndata {len(data)}\n".encode()
        stream += data + b"\n"
    stream += b"\n"
    run(["git", "fast-import", "--quiet"], cwd=fork, input=bytes(stream))
    git("reset", "-q", "--hard", "main", cwd=fork)
    git("tag", "-a", "v1", "-m", "v1", cwd=fork)
    return fork


def make_project(dest: Path, fork: Path, n: int) -> Path:
    project = dest / "project"
    project.mkdir()
    run([*forkpatch_argv(), "init", "--fork-url", str(fork), "--base", "v1"], cwd=project)
    patches = project / "patches"
    entries = []
    for i in range(n):
        name = f"p{i:05d}"
        (patches / f"{name}.patch").write_text(_patch_text(i))
        entries.append(f"  - name: {name}\n    file: {name}.patch\n    summary: patch {i}\n")
    series = project / "series.yaml"
    series.write_text(series.read_text().replace("patches: []\n", "patches:\n" + "".join(entries)))
    return project


def git_shim(dest: Path) -> tuple[Path, Path]:
    """A directory with a ``git`` that logs each call, and the log file."""
    real = shutil.which("git")
    assert real, "git is not on PATH"
    shim_dir = dest / "shim"
    shim_dir.mkdir()
    log = dest / "git-calls.log"
    shim = shim_dir / "git"
    shim.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec "{real}" "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return shim_dir, log


def measure(project: Path, args: list[str], shim_dir: Path, log: Path) -> dict[str, object]:
    log.write_text("")
    env = bench_env({"PATH": f"{shim_dir}{os.pathsep}{os.environ['PATH']}"})
    t = timed([*forkpatch_argv(), *args], cwd=project, env=env)
    calls = [line.split(" ", 1)[0] for line in log.read_text().splitlines()]
    by_cmd: dict[str, int] = {}
    for c in calls:
        # the first word that is not an option: the git subcommand
        by_cmd[c] = by_cmd.get(c, 0) + 1
    if t.rc != 0:
        raise RuntimeError(
            f"forkpatch {' '.join(args)} failed: {t.stderr.decode(errors='replace')[-2000:]}"
        )
    return {
        "command": "forkpatch " + " ".join(args),
        "wall_s": round(t.seconds, 2),
        "cpu_s": round(t.cpu, 2),
        "git_processes": len(calls),
        "git_subcommands": _subcommands(log),
    }


def _subcommands(log: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in log.read_text().splitlines():
        words = line.split()
        # the first word that is neither an option nor a `-c NAME=VALUE` setting
        key = next(
            (w for i, w in enumerate(words) if w[0] != "-" and words[i - 1 : i] != ["-c"]), "?"
        )
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000", help="comma-separated series sizes")
    ap.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "scale")
    ap.add_argument("--json", type=Path, help="write the results here")
    opts = ap.parse_args(argv)
    results = {"machine": machine_info(), "runs": []}
    for n in [int(x) for x in opts.sizes.split(",")]:
        dest = opts.workdir / f"n{n}"
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        t0 = time.perf_counter()
        fork = make_fork(dest, n)
        project = make_project(dest, fork, n)
        print(f"N={n}: fork and series made in {time.perf_counter() - t0:.1f}s", flush=True)
        shim_dir, log = git_shim(dest)
        before = (project / "series.yaml").read_bytes()
        rows = []
        for label, args in (
            ("apply (first)", ["apply"]),
            ("export (no-op)", ["export"]),
            ("apply (re-apply)", ["apply"]),
            ("status", ["status"]),
        ):
            r = measure(project, args, shim_dir, log)
            r["label"] = label
            r["patches"] = n
            rows.append(r)
            print(
                f"  {label:<18} {r['wall_s']:8.2f}s wall {r['cpu_s']:8.2f}s cpu "
                f"{r['git_processes']:6d} git processes  {r['git_subcommands']}",
                flush=True,
            )
        assert (project / "series.yaml").read_bytes() == before, "export changed series.yaml"
        results["runs"].extend(rows)  # type: ignore[union-attr]
    if opts.json:
        opts.json.parent.mkdir(parents=True, exist_ok=True)
        opts.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
