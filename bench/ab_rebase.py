"""Interleaved A/B of two forkpatch source trees, with git rebase in every round.

On a machine whose speed drifts (a shared VM), timing each tool's runs one after
the other can favour whichever ran in a fast minute; here every round runs git
rebase, then forkpatch from OLD_SRC, then from NEW_SRC, for the 20-stop rebase
(bench_conflicts.py) and the no-conflict one (bench_rebase.py's), 300 patches.

    git archive <commit> src | tar -x -C /tmp/old
    python bench/ab_rebase.py OLD_SRC NEW_SRC [--rounds 3] [--workdir DIR]
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_conflicts as bc
from common import DEFAULT_WORKDIR, bench_env, forkpatch_argv, fresh_clone, fresh_project, timed

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("old", type=Path)
ap.add_argument("new", type=Path)
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
a = ap.parse_args()
workdir, n, rounds = a.workdir, 300, a.rounds
tag, _ = bc.make_conflict_tag(workdir, n, 20)
variants = {"old": str(a.old.resolve()), "new": str(a.new.resolve())}
res = {
    k: []
    for k in [
        "git rebase 20 stops",
        "old 20 stops",
        "new 20 stops",
        "git rebase no conflict",
        "old no conflict",
        "new no conflict",
    ]
}
fp = forkpatch_argv()
run = workdir / "ab"
run.mkdir(parents=True, exist_ok=True)
for r in range(rounds):
    env = bench_env()
    clone = run / "clone"
    fresh_clone(workdir, clone, f"series-{n}")
    t = bc.git_rebase(clone, tag, env, 20)
    res["git rebase 20 stops"].append(t.seconds)
    for v, path in variants.items():
        e = bench_env({"PYTHONPATH": path})
        proj = bc.used_project(workdir, n, run / f"p-{v}", tag, e)
        t = bc.forkpatch_rebase(proj, tag, e, 20)
        assert t.rc == 0, t.note
        res[f"{v} 20 stops"].append(t.seconds)
    fresh_clone(workdir, clone, f"series-{n}")
    t = timed(["git", "rebase", "-q", "--onto", "v1.1.0", "v1.0.0", "work"], cwd=clone, env=env)
    res["git rebase no conflict"].append(t.seconds)
    for v, path in variants.items():
        e = bench_env({"PYTHONPATH": path})
        proj = run / f"nc-{v}"
        fresh_project(workdir, n, proj)
        t = timed([*fp, "-q", "rebase", "--onto", "v1.1.0"], cwd=proj, env=e)
        assert t.rc == 0
        res[f"{v} no conflict"].append(t.seconds)
    print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in res.items()), flush=True)
for k, v in res.items():
    print(f"{k:24s} median {statistics.median(v):6.2f}  runs {' '.join(f'{x:.2f}' for x in v)}")
(run / "result.json").write_text(json.dumps(res, indent=1) + "\n")
