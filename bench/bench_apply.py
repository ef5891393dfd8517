"""Apply a series onto its base: forkpatch vs ``git am`` vs ``quilt push -a``.

The target: ``forkpatch apply`` at least as fast as ``git am`` and at least
4x faster than ``quilt push -a``, on the same N patches (default 300) and the
same ~5,800-file tree (made by gen_tree.py). Each tool starts from a fresh copy
made outside the timed region:

* forkpatch apply   a fresh project (series.yaml + patches/, no .forkpatch/):
                    builds its store, applies in memory, writes the commits with
                    fast-import, checks out the work tree (``git worktree add``);
* forkpatch apply --sparse
                    the same with a sparse work tree (root files and the
                    directories the series touches);
* forkpatch status  the in-memory engine alone (no commits, no work tree);
* engine in-process the same engine inside one Python process, timed around
                    parse + apply + fast-import (no interpreter start-up, no checkout);
* git am            a clone with v1.0.0 checked out, ``git am mbox``;
* quilt push -a     a plain copy of v1.0.0 with the quilt series in patches/.

Every run is checked: the tree forkpatch / git am / quilt end with must equal
the tree of ``series-N`` in the generated repository.

    python bench/bench_apply.py [--workdir DIR] [-n 300] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    DEFAULT_WORKDIR,
    Measure,
    Timing,
    bench_env,
    cmdline,
    data_dir,
    dir_matches_tree,
    forkpatch_argv,
    fresh_clone,
    fresh_project,
    fresh_quilt,
    git,
    load_manifest,
    machine_info,
    print_machine,
    profile_forkpatch,
    repeat,
    rmtree,
    run,
    table,
    timed,
    upstream_tree,
)


def probe(project: Path, write: bool) -> None:
    """In-process engine timing (run as a subprocess of the benchmark)."""
    t0 = time.perf_counter()
    from forkpatch.engine import SeriesApplier
    from forkpatch.project import open_project

    t1 = time.perf_counter()
    proj = open_project(project)
    fork = proj.fork()
    base = fork.verify_base(proj.series.base.tag, proj.series.base.commit)
    t2 = time.perf_counter()
    items = proj.items()
    t3 = time.perf_counter()
    result = SeriesApplier(fork.store, base).run(items, write=write)
    t4 = time.perf_counter()
    print(
        json.dumps(
            {
                "import": t1 - t0,
                "open": t2 - t1,
                "parse": t3 - t2,
                "apply": t4 - t3,
                "ok": result.ok,
                "head": result.head,
                "tree": fork.store.tree_of(result.head) if result.head else None,
                "statuses": _count(r.status for r in result.results),
            }
        )
    )


def _count(items: object) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:  # type: ignore[attr-defined]
        out[x] = out.get(x, 0) + 1
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    ap.add_argument("-n", type=int, default=300, help="number of patches (a generated size)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--skip",
        default="",
        help="comma list of tools to skip: fp,sparse,push,status,engine,am,am-co,quilt",
    )
    ap.add_argument(
        "--profile",
        type=int,
        metavar="N",
        help="instead of timing: profile forkpatch on the N-patch series (cProfile)",
    )
    ap.add_argument("--probe", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--probe-write", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.probe:
        probe(a.probe, a.probe_write)
        return 0

    workdir: Path = a.workdir
    if a.profile:
        proj = fresh_project(workdir, a.profile, workdir / "run" / "profile")
        profile_forkpatch(["apply"], proj, workdir / "run" / "forkpatch.prof")
        return 0
    n = a.n
    manifest = load_manifest(workdir)
    if n not in manifest["sizes"]:  # type: ignore[operator]
        raise SystemExit(f"no generated series of {n} patches (have {manifest['sizes']})")
    skip = set(filter(None, a.skip.split(",")))
    info = machine_info()
    print_machine(info)
    print(
        f"tree: {manifest['files_v1_0_0']} files, {manifest['lines_v1_0_0']} lines; "
        f"{n} patches; {a.reps} runs each (median)"
    )
    data = data_dir(workdir)
    runs = workdir / "run"
    runs.mkdir(parents=True, exist_ok=True)
    want_tree = upstream_tree(workdir, f"series-{n}")
    fp = forkpatch_argv()
    env = bench_env()
    results: list[Measure] = []

    # -- forkpatch apply
    proj = runs / "fp-apply"
    fp_apply = [*fp, "-q", "apply"]

    def verify_fp(_ctx: object, t: Timing, _i: int) -> tuple[bool, str]:
        if t.rc != 0:
            return False, f"exit {t.rc}: {t.stderr.decode(errors='replace')[-300:]}"
        got = git("-C", str(proj / ".forkpatch" / "worktree"), "rev-parse", "HEAD^{tree}")
        return (got == want_tree), ("" if got == want_tree else "tree differs from series-N")

    if "fp" not in skip:
        print(f"  forkpatch apply: cd <fresh project> && {cmdline(fp_apply)}")
        results.append(
            repeat(
                "forkpatch apply",
                cmdline(fp_apply),
                a.reps,
                prepare=lambda i: fresh_project(workdir, n, proj),
                measure=lambda ctx: timed(fp_apply, cwd=proj, env=env),
                verify=verify_fp,
            )
        )

    # -- forkpatch apply --sparse: the same, with a work tree of the root files and
    #    the directories the series touches only.
    fp_sparse = [*fp, "-q", "apply", "--sparse"]
    if "sparse" not in skip:
        print(f"  forkpatch apply --sparse: cd <fresh project> && {cmdline(fp_sparse)}")
        results.append(
            repeat(
                "forkpatch apply --sparse",
                cmdline(fp_sparse),
                a.reps,
                prepare=lambda i: fresh_project(workdir, n, proj),
                measure=lambda ctx: timed(fp_sparse, cwd=proj, env=env),
                verify=verify_fp,
            )
        )

    # -- forkpatch push --all: the same job as `quilt push -a`, on a work tree that
    #    already holds the base (quilt's tree copy is not timed either).
    fp_push = [*fp, "-q", "push", "--all"]

    def prepare_push(_i: int) -> Path:
        fresh_project(workdir, n, proj)
        for cmd in ([*fp, "-q", "apply"], [*fp, "-q", "pop", "--all"]):
            subprocess.run(cmd, cwd=proj, env=env, check=True, capture_output=True)
        return proj

    if "push" not in skip:
        print(f"  forkpatch push --all: cd <project, work tree at the base> && {cmdline(fp_push)}")
        results.append(
            repeat(
                "forkpatch push --all",
                cmdline(fp_push),
                a.reps,
                prepare=prepare_push,
                measure=lambda ctx: timed(fp_push, cwd=proj, env=env),
                verify=verify_fp,
            )
        )

    # -- forkpatch status (in-memory engine, nothing written)
    fp_status = [*fp, "-q", "status"]
    if "status" not in skip:
        print(f"  forkpatch status: cd <fresh project> && {cmdline(fp_status)}")
        results.append(
            repeat(
                "forkpatch status (engine only)",
                cmdline(fp_status),
                a.reps,
                prepare=lambda i: fresh_project(workdir, n, proj),
                measure=lambda ctx: timed(fp_status, cwd=proj, env=env),
            )
        )

    # -- engine in-process (parse + apply + fast-import)
    inner: list[dict[str, object]] = []
    probe_cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--probe",
        str(proj),
        "--probe-write",
    ]

    def verify_probe(_ctx: object, t: Timing, _i: int) -> tuple[bool, str]:
        if t.rc != 0:
            return False, t.stderr.decode(errors="replace")[-300:]
        got = json.loads(t.stdout)
        inner.append(got)
        return got["tree"] == want_tree, ("" if got["tree"] == want_tree else "tree differs")

    if "engine" not in skip:
        print(f"  engine in-process: {cmdline(probe_cmd)}")
        m = repeat(
            "engine in-process (subprocess)",
            cmdline(probe_cmd),
            a.reps,
            prepare=lambda i: fresh_project(workdir, n, proj),
            measure=lambda ctx: timed(probe_cmd, cwd=proj, env=env),
            verify=verify_probe,
        )
        results.append(m)
        if inner:
            med = sorted(inner, key=lambda d: d["parse"] + d["apply"])[len(inner) // 2]  # type: ignore[operator]
            e = Measure("engine in-process (parse+apply+fast-import)", "(inside the probe)")
            e.runs = [float(d["parse"]) + float(d["apply"]) for d in inner]  # type: ignore[arg-type]
            e.note = (
                f"median run: parse {med['parse']:.2f}s, apply+write {med['apply']:.2f}s, "
                f"imports {med['import']:.2f}s, open {med['open']:.2f}s"
            )
            results.append(e)

    # -- git am
    mbox = data / f"mbox-{n}.mbox"
    clone = runs / "git-am"
    am = ["git", "am", "-q", str(mbox)]

    def verify_tree_clone(_ctx: object, t: Timing, _i: int) -> tuple[bool, str]:
        if t.rc != 0:
            return False, f"exit {t.rc}: {t.stderr.decode(errors='replace')[-300:]}"
        got = git("-C", str(clone), "rev-parse", "HEAD^{tree}")
        return got == want_tree, ("" if got == want_tree else "tree differs from series-N")

    if "am" not in skip:
        print(
            f"  git am: git clone -q --shared --no-checkout upstream.git C && "
            f"git -C C checkout -q -b work v1.0.0 && cd C && {cmdline(am)}"
        )
        results.append(
            repeat(
                "git am",
                cmdline(am),
                a.reps,
                prepare=lambda i: fresh_clone(workdir, clone, "v1.0.0"),
                measure=lambda ctx: timed(am, cwd=clone, env=env),
                verify=verify_tree_clone,
            )
        )

    # -- git checkout + git am: the same work forkpatch apply does (it creates its work
    #    tree), for an apples-to-apples view; the clone itself stays untimed.
    co_am = ["sh", "-c", f"git checkout -q -b work v1.0.0 && git am -q {mbox}"]
    if "am-co" not in skip:
        print(
            f"  git checkout + git am: git clone -q --shared --no-checkout upstream.git C && "
            f"cd C && {cmdline(co_am)}"
        )

        def prepare_bare(_i: int) -> Path:
            rmtree(clone)
            run(
                [
                    "git",
                    "clone",
                    "-q",
                    "--shared",
                    "--no-checkout",
                    str(data / "upstream.git"),
                    str(clone),
                ]
            )
            return clone

        results.append(
            repeat(
                "git checkout + git am",
                cmdline(co_am),
                a.reps,
                prepare=prepare_bare,
                measure=lambda ctx: timed(co_am, cwd=clone, env=env),
                verify=verify_tree_clone,
            )
        )

    # -- quilt push -a
    qdir = runs / "quilt"
    quilt = ["quilt", "--quiltrc", "/dev/null", "push", "-a", "-q"]

    def verify_quilt(_ctx: object, t: Timing, i: int) -> tuple[bool, str]:
        if t.rc != 0:
            return False, f"exit {t.rc}: {t.stdout.decode(errors='replace')[-300:]}"
        if i == 0 and not dir_matches_tree(workdir, qdir, f"series-{n}"):
            return False, "tree differs from series-N"
        return True, ""

    if "quilt" not in skip:
        print(
            f"  quilt: git archive v1.0.0 | tar -x -C Q && cp -r quilt-{n}/patches Q/ && "
            f"cd Q && {cmdline(quilt)}"
        )
        results.append(
            repeat(
                "quilt push -a",
                cmdline(quilt),
                a.reps,
                prepare=lambda i: fresh_quilt(workdir, n, qdir, "v1.0.0"),
                measure=lambda ctx: timed(quilt, cwd=qdir, env=env),
                verify=verify_quilt,
            )
        )

    for d in (proj, clone, qdir):
        rmtree(d)
    report(results, n, a.reps, info, manifest, workdir)
    return 0 if all(m.ok for m in results) else 1


def report(
    results: list[Measure],
    n: int,
    reps: int,
    info: dict[str, str],
    manifest: dict[str, object],
    workdir: Path,
) -> None:
    by = {m.tool: m for m in results}
    ref = by.get("forkpatch apply")
    rows = []
    for m in results:
        ratio = f"{m.median / ref.median:.2f}x" if ref and m is not ref else "-"
        rows.append(
            [
                m.tool,
                f"{m.median:.2f}",
                m.spread(),
                f"{m.cpu:.2f}" if m.cpus else "-",
                ratio,
                "ok" if m.ok else "FAILED",
                m.note,
            ]
        )
    print()
    print(f"## apply {n} patches onto v1.0.0 (median of {reps})")
    print(
        table(rows, ["tool", "wall s", "range", "cpu s", "tool / forkpatch apply", "check", "note"])
    )
    if ref:
        am, quilt = by.get("git am"), by.get("quilt push -a")
        if am:
            r = am.median / ref.median
            print(
                f"target 1: forkpatch apply <= git am: git am / forkpatch = {r:.2f}x "
                f"-> {'MET' if r >= 1 else 'MISSED'}"
            )
        if quilt:
            r = quilt.median / ref.median
            print(
                f"target 2: forkpatch apply >= 4x faster than quilt: quilt / forkpatch = "
                f"{r:.2f}x -> {'MET' if r >= 4 else 'MISSED'} (apply also creates the "
                "work tree; quilt's tree copy is not timed)"
            )
            push = by.get("forkpatch push --all")
            if push:
                r = quilt.median / push.median
                print(
                    f"target 2, like for like (both on an existing tree at the base): "
                    f"quilt / forkpatch push --all = {r:.2f}x -> "
                    f"{'MET' if r >= 4 else 'MISSED'}"
                )
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / f"apply-{n}.json").write_text(
        json.dumps(
            {"n": n, "reps": reps, "machine": info, "results": [m.to_json() for m in results]},
            indent=2,
        )
        + "\n"
    )
    print(
        f"reproduce: python bench/gen_tree.py --workdir {workdir} && "
        f"python bench/bench_apply.py --workdir {workdir} -n {n} --reps {reps}"
    )


if __name__ == "__main__":
    sys.exit(main())
