"""Rebase a series onto a newer upstream: forkpatch vs git rebase vs git am -3 vs quilt.

The target: ``forkpatch rebase --onto v1.1.0`` takes at most 1/3 of
``git rebase``'s time, less than ``git am -3``'s, at least 4x less than quilt's,
and grows linearly with the number of patches (100 / 300 / 1000). A later target asks
for at most 1/5 of ``git rebase``'s time; both verdicts are printed.

The generated drift (gen_tree.py) makes every patch land: most with an offset,
a few only with fuzz or a 3-way merge, a few already upstream. Tools, each from
a fresh copy made outside the timed region:

* forkpatch rebase    ``forkpatch rebase --onto v1.1.0`` in a fresh project (only
                      when the installed forkpatch has the command);
* forkpatch check     ``forkpatch check --onto v1.1.0`` (when it exists): the
                      in-memory dry run;
* rebase engine proxy the engine calls a rebase needs, in one Python process
                      started by the benchmark: apply the series on v1.0.0 in
                      memory (merge bases), apply it on v1.1.0 with 3-way merges
                      and upstream detection, write the commits (fast-import),
                      rewrite patches/ and series.yaml. No work tree. This is a
                      floor for what ``forkpatch rebase`` can cost, measured even
                      before the command exists;
* git rebase          ``git rebase -q --onto v1.1.0 v1.0.0 work`` in a clone with
                      ``series-N`` checked out on ``work`` (merge backend, ort);
* git am -3           ``git am -3 -q mbox`` in a clone with v1.1.0 checked out;
                      when am stops on a patch that is already upstream, the
                      ``git am --skip`` that a user runs is timed too;
* quilt               ``quilt push -a`` on a plain copy of v1.1.0 (fuzz 2, quilt's
                      default). It stops at the first patch that needs more than
                      fuzz; the time to that point is reported, and the time to
                      the end when each failure is forced (``quilt push -f`` +
                      ``quilt refresh``, leaving .rej files: a lower bound on a
                      human's work).

Correctness: forkpatch's result tree (the proxy's commits) must equal the tree
``git rebase`` produced.

    python bench/bench_rebase.py [--workdir DIR] [--sizes 100,300,1000] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
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
    forkpatch_argv,
    forkpatch_has,
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
    table,
    timed,
)

ONTO = "v1.1.0"


def probe(project: Path) -> None:
    """The rebase engine proxy (runs as a subprocess; prints timings as JSON)."""
    t0 = time.perf_counter()
    from dataclasses import replace

    from forkpatch.engine import SeriesApplier, canonical_diff, diffs_of_commits
    from forkpatch.project import open_project

    t1 = time.perf_counter()
    proj = open_project(project)
    fork = proj.fork()
    series = proj.series
    old = fork.verify_base(series.base.tag, series.base.commit)
    new = fork.resolve_tag(ONTO)
    items = proj.items()
    t2 = time.perf_counter()
    before = SeriesApplier(fork.store, old).run(items, write=False)
    merge_bases = {r.name: r.images for r in before.results}
    t3 = time.perf_counter()
    after = SeriesApplier(
        fork.store,
        new,
        three_way=True,
        detect_upstream=True,
        merge_bases=merge_bases,
        labels=(ONTO, "patch"),
    ).run(items, write=True, stop_at_conflict=False)
    t4 = time.perf_counter()
    diffs = diffs_of_commits(fork.store, after.commits)
    kept = []
    for item, r in zip(items, after.results, strict=True):
        if r.status == "upstreamed":
            continue
        kept.append(item.entry)
        if r.commit is not None and item.patch is not None:
            proj.write_patch(item.entry, item.patch.header, canonical_diff(diffs[r.commit]))
    proj.save_series(
        replace(series, base=replace(series.base, tag=ONTO, commit=new), patches=tuple(kept))
    )
    t5 = time.perf_counter()
    statuses: dict[str, int] = {}
    for r in after.results:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    print(
        json.dumps(
            {
                "import": t1 - t0,
                "parse": t2 - t1,
                "old_base": t3 - t2,
                "new_base": t4 - t3,
                "write": t5 - t4,
                "ok": after.ok,
                "statuses": statuses,
                "tree": fork.store.tree_of(after.head) if after.head else None,
                "conflicts": [r.name for r in after.results if r.status == "conflict"][:5],
            }
        )
    )


def am3(clone: Path, mbox: Path, env: dict[str, str]) -> Timing:
    """git am -3, plus the ``git am --skip`` a user runs for an already-applied patch."""
    t = timed(["git", "am", "-3", "-q", str(mbox)], cwd=clone, env=env)
    total, cpu, skips = t.seconds, t.cpu, 0
    while t.rc != 0:
        msg = (t.stdout + t.stderr).decode(errors="replace")
        if "No changes" not in msg and "already applied" not in msg:
            return Timing(
                total,
                t.rc,
                cpu=cpu,
                note=f"stopped: {msg.strip()[-200:]}",
                stdout=t.stdout,
                stderr=t.stderr,
            )
        skips += 1
        t = timed(["git", "am", "-q", "--skip"], cwd=clone, env=env)
        total += t.seconds
        cpu += t.cpu
    return Timing(total, 0, cpu=cpu, note=f"{skips} --skip" if skips else "")


def quilt_run(qdir: Path, env: dict[str, str], limit: float) -> Timing:
    """quilt push -a; at a failure: note the time, force it (push -f + refresh), go on."""
    q = ["quilt", "--quiltrc", "/dev/null"]
    total = cpu = 0.0
    first_fail: tuple[float, str] | None = None
    forced = 0
    while True:
        t = timed([*q, "push", "-a", "-q"], cwd=qdir, env=env)
        total += t.seconds
        cpu += t.cpu
        if t.rc == 0:
            break
        out = (t.stdout + t.stderr).decode(errors="replace")
        if "File series fully applied" in out or t.rc == 2:
            break
        if first_fail is None:
            top = timed([*q, "next"], cwd=qdir, env=env).stdout.decode().strip()
            first_fail = (total, top)
        f = timed([*q, "push", "-f", "-q"], cwd=qdir, env=env)
        r = timed([*q, "refresh"], cwd=qdir, env=env)
        total += f.seconds + r.seconds
        cpu += f.cpu + r.cpu
        forced += 1
        if total > limit:
            return Timing(total, 1, cpu=cpu, note=f"gave up after {limit:.0f}s, {forced} forced")
    if first_fail is None:
        return Timing(total, 0, cpu=cpu, note="all applied (fuzz allowed)")
    return Timing(
        total,
        0,
        cpu=cpu,
        note=f"first failure after {first_fail[0]:.2f}s at {first_fail[1][:40]}; "
        f"{forced} forced (push -f + refresh)",
    )


def run_size(
    workdir: Path,
    n: int,
    reps: int,
    skip: set[str],
    env: dict[str, str],
    have_rebase: bool,
    have_check: bool,
    quilt_limit: float,
) -> list[Measure]:
    data = data_dir(workdir)
    runs = workdir / "run"
    runs.mkdir(parents=True, exist_ok=True)
    fp = forkpatch_argv()
    results: list[Measure] = []
    print(f"\n# {n} patches: rebase v1.0.0 -> {ONTO}")
    proj = runs / "fp-rebase"
    rebased_tree: dict[str, str] = {}

    # -- git rebase (first: its result tree is the reference)
    clone = runs / "git-rebase"
    rebase = ["git", "rebase", "-q", "--onto", ONTO, "v1.0.0", "work"]

    def verify_rebase(_c: object, t: Timing, _i: int) -> tuple[bool, str]:
        if t.rc != 0:
            return False, f"exit {t.rc}: {(t.stdout + t.stderr).decode(errors='replace')[-300:]}"
        rebased_tree["git"] = git("-C", str(clone), "rev-parse", "HEAD^{tree}")
        count = git("-C", str(clone), "rev-list", "--count", f"{ONTO}..HEAD")
        return True, f"{count} commits kept"

    if "rebase" not in skip:
        print(
            f"  git rebase: git clone -q --shared --no-checkout upstream.git C && "
            f"git -C C checkout -q -b work series-{n} && cd C && {cmdline(rebase)}"
        )
        results.append(
            repeat(
                "git rebase",
                cmdline(rebase),
                reps,
                prepare=lambda i: fresh_clone(workdir, clone, f"series-{n}"),
                measure=lambda c: timed(rebase, cwd=clone, env=env),
                verify=verify_rebase,
            )
        )

    # -- forkpatch rebase (when the command exists)
    if have_rebase and "fp" not in skip:
        cmd = [*fp, "-q", "rebase", "--onto", ONTO]
        print(f"  forkpatch rebase: cd <fresh project> && {cmdline(cmd)}")

        def verify_fp(_c: object, t: Timing, i: int) -> tuple[bool, str]:
            if t.rc != 0:
                return False, f"exit {t.rc}: {t.stderr.decode(errors='replace')[-300:]}"
            if i == 0 and "git" in rebased_tree:
                # Re-apply the rewritten series on v1.1.0: must give git rebase's tree.
                p = timed(
                    [
                        sys.executable,
                        str(Path(__file__).with_name("bench_apply.py")),
                        "--probe",
                        str(proj),
                        "--probe-write",
                    ],
                    cwd=proj,
                    env=env,
                )
                got = json.loads(p.stdout or b"{}").get("tree")
                if got != rebased_tree["git"]:
                    return False, "rewritten series does not give git rebase's tree"
            return True, ""

        results.append(
            repeat(
                "forkpatch rebase",
                cmdline(cmd),
                reps,
                prepare=lambda i: fresh_project(workdir, n, proj),
                measure=lambda c: timed(cmd, cwd=proj, env=env),
                verify=verify_fp,
            )
        )

    if have_check and "check" not in skip:
        cmd = [*fp, "-q", "check", "--onto", ONTO]
        print(f"  forkpatch check: cd <fresh project> && {cmdline(cmd)}")
        results.append(
            repeat(
                "forkpatch check --onto",
                cmdline(cmd),
                reps,
                prepare=lambda i: fresh_project(workdir, n, proj),
                measure=lambda c: timed(cmd, cwd=proj, env=env),
            )
        )

    # -- the engine proxy
    inner: list[dict[str, object]] = []
    probe_cmd = [sys.executable, str(Path(__file__).resolve()), "--probe", str(proj)]

    def verify_probe(_c: object, t: Timing, _i: int) -> tuple[bool, str]:
        if t.rc != 0:
            return False, t.stderr.decode(errors="replace")[-300:]
        got = json.loads(t.stdout)
        inner.append(got)
        st = ", ".join(f"{k} {v}" for k, v in sorted(got["statuses"].items()))
        if not got["ok"]:
            return False, f"conflicts: {got['conflicts']} ({st})"
        if "git" in rebased_tree and got["tree"] != rebased_tree["git"]:
            return False, f"tree differs from git rebase's ({st})"
        return True, st

    if "proxy" not in skip:
        print(f"  rebase engine proxy: cd <fresh project> && {cmdline(probe_cmd)}")
        results.append(
            repeat(
                "rebase engine proxy",
                cmdline(probe_cmd),
                reps,
                prepare=lambda i: fresh_project(workdir, n, proj),
                measure=lambda c: timed(probe_cmd, cwd=proj, env=env),
                verify=verify_probe,
            )
        )
        if inner:
            med = sorted(inner, key=lambda d: d["new_base"])[len(inner) // 2]  # type: ignore[arg-type, return-value]
            results[-1].note += (
                f"; median split: imports {med['import']:.2f}s, parse "
                f"{med['parse']:.2f}s, old base {med['old_base']:.2f}s, new "
                f"base+3-way+fast-import {med['new_base']:.2f}s, rewrite "
                f"{med['write']:.2f}s"
            )

    # -- git am -3
    am_clone = runs / "git-am3"
    mbox = data / f"mbox-{n}.mbox"

    def verify_am(_c: object, t: Timing, _i: int) -> tuple[bool, str]:
        if t.rc != 0:
            return False, t.note
        tree = git("-C", str(am_clone), "rev-parse", "HEAD^{tree}")
        same = "git" not in rebased_tree or tree == rebased_tree["git"]
        return same, t.note + ("" if same else "; tree differs from git rebase's")

    if "am" not in skip:
        print(
            f"  git am -3: git clone -q --shared --no-checkout upstream.git C && "
            f"git -C C checkout -q -b work {ONTO} && cd C && git am -3 -q mbox-{n}.mbox "
            "[&& git am --skip for each patch already upstream]"
        )
        results.append(
            repeat(
                "git am -3",
                f"git am -3 -q mbox-{n}.mbox",
                reps,
                prepare=lambda i: fresh_clone(workdir, am_clone, ONTO),
                measure=lambda c: am3(am_clone, mbox, env),
                verify=verify_am,
            )
        )

    # -- quilt
    qdir = runs / "quilt-rebase"
    if "quilt" not in skip:
        print(
            f"  quilt: git archive {ONTO} | tar -x -C Q && cp -r quilt-{n}/patches Q/ && "
            "cd Q && quilt push -a -q [; at a failure: quilt push -f -q && quilt refresh]"
        )
        results.append(
            repeat(
                "quilt push -a (fuzz 2)",
                "quilt push -a -q",
                reps,
                prepare=lambda i: fresh_quilt(workdir, n, qdir, ONTO),
                measure=lambda c: quilt_run(qdir, env, quilt_limit),
                verify=lambda c, t, i: (t.rc == 0, t.note),
            )
        )
    for d in (proj, clone, am_clone, qdir):
        rmtree(d)
    return results


def report(
    all_results: dict[int, list[Measure]],
    reps: dict[int, int],
    info: dict[str, str],
    workdir: Path,
    have_rebase: bool,
) -> None:
    ours = "forkpatch rebase" if have_rebase else "rebase engine proxy"
    print()
    for n, results in all_results.items():
        by = {m.tool: m for m in results}
        ref = by.get(ours)
        rows = []
        for m in results:
            ratio = f"{m.median / ref.median:.2f}x" if ref and m is not ref else "-"
            rows.append(
                [
                    m.tool,
                    f"{m.median:.2f}",
                    m.spread(),
                    f"{m.cpu:.2f}",
                    ratio,
                    "ok" if m.ok else "FAILED",
                    m.note,
                ]
            )
        print(f"## rebase {n} patches v1.0.0 -> {ONTO} (median of {reps[n]})")
        print(table(rows, ["tool", "wall s", "range", "cpu s", f"tool / {ours}", "check", "note"]))
        if ref:
            for tool, need, label in (
                ("git rebase", 3.0, "<= 1/3 of git rebase"),
                ("git rebase", 5.0, "<= 1/5 of git rebase"),
                ("git am -3", 1.0, "faster than git am -3"),
                ("quilt push -a (fuzz 2)", 4.0, ">= 4x faster than quilt"),
            ):
                if tool in by:
                    r = by[tool].median / ref.median
                    print(
                        f"target: {ours} {label}: {tool} / ours = {r:.2f}x (need >= {need:g}x)"
                        f" -> {'MET' if r >= need else 'MISSED'}"
                    )
        print()
    sizes = sorted(all_results)
    if len(sizes) >= 2:
        print("## growth (seconds per patch; linear = flat)")
        tools = [m.tool for m in all_results[sizes[-1]]]
        rows = []
        for tool in tools:
            meds = {
                n: next((m.median for m in all_results[n] if m.tool == tool), None) for n in sizes
            }
            cells = [
                f"{meds[n]:.2f} ({1000 * meds[n] / n:.1f} ms/patch)" if meds[n] else "-"
                for n in sizes
            ]
            lo, hi = sizes[0], sizes[-1]
            slope = "-"
            if meds[lo] and meds[hi]:
                slope = f"{(meds[hi] - meds[lo]) / (hi - lo) * 1000:.1f} ms/patch"
            rows.append([tool, *cells, slope])
        print(
            table(rows, ["tool", *[f"N={n}" for n in sizes], f"marginal {sizes[0]}->{sizes[-1]}"])
        )
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "rebase.json").write_text(
        json.dumps(
            {
                "machine": info,
                "reps": reps,
                "results": {n: [m.to_json() for m in rs] for n, rs in all_results.items()},
            },
            indent=2,
        )
        + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    ap.add_argument("--sizes", default="100,300,1000")
    ap.add_argument("--reps", type=int, default=3, help="runs per tool below --big")
    ap.add_argument(
        "--big",
        type=int,
        default=1000,
        help="sizes >= this get --big-reps runs and no quilt unless --quilt-big",
    )
    ap.add_argument("--big-reps", type=int, default=1)
    ap.add_argument("--quilt-big", action="store_true")
    ap.add_argument(
        "--quilt-limit",
        type=float,
        default=300.0,
        help="give up a quilt run after this many seconds",
    )
    ap.add_argument("--skip", default="", help="comma list: rebase,fp,check,proxy,am,quilt")
    ap.add_argument(
        "--profile",
        type=int,
        metavar="N",
        help="instead of timing: profile forkpatch on the N-patch series (cProfile)",
    )
    ap.add_argument("--probe", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.probe:
        probe(a.probe)
        return 0
    workdir: Path = a.workdir
    if a.profile:
        proj = fresh_project(workdir, a.profile, workdir / "run" / "profile")
        profile_forkpatch(["rebase", "--onto", ONTO], proj, workdir / "run" / "forkpatch.prof")
        return 0
    manifest = load_manifest(workdir)
    sizes = sorted(int(x) for x in a.sizes.split(","))
    missing = [n for n in sizes if n not in manifest["sizes"]]  # type: ignore[operator]
    if missing:
        raise SystemExit(f"no generated series of {missing} patches (have {manifest['sizes']})")
    info = machine_info()
    print_machine(info)
    have_rebase = forkpatch_has("rebase")
    have_check = forkpatch_has("check")
    print(
        f"forkpatch rebase: {'present' if have_rebase else 'ABSENT (measuring the engine proxy)'}"
        f"; forkpatch check: {'present' if have_check else 'absent'}"
    )
    print(
        f"tree: {manifest['files_v1_0_0']} files; drift {manifest['drift_shortstat']}; "
        f"patch kinds per size: {manifest['kind_counts_per_size']}"
    )
    env = bench_env()
    skip = set(filter(None, a.skip.split(",")))
    all_results: dict[int, list[Measure]] = {}
    reps: dict[int, int] = {}
    for n in sizes:
        big = n >= a.big
        reps[n] = a.big_reps if big else a.reps
        s = set(skip)
        if big and not a.quilt_big:
            s.add("quilt")
            print(f"(quilt skipped at N={n}: pass --quilt-big to include it)")
        all_results[n] = run_size(
            workdir, n, reps[n], s, env, have_rebase, have_check, a.quilt_limit
        )
    report(all_results, reps, info, workdir, have_rebase)
    print(
        f"reproduce: python bench/gen_tree.py --workdir {workdir} && python "
        f"bench/bench_rebase.py --workdir {workdir} --sizes {a.sizes} --reps {a.reps} "
        f"--big {a.big} --big-reps {a.big_reps}" + (" --quilt-big" if a.quilt_big else "")
    )
    ok = all(m.ok for rs in all_results.values() for m in rs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
