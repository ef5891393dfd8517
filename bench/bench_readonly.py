"""Read-only commands on the real fork: ``forkpatch top`` and ``forkpatch status``
against ``git status`` in a checkout of the fork.

What a developer runs between edits, many times a day. The project is the
repository's own series (series.yaml + patches/) applied on the fork (the fixture,
or FORKPATCH_FORK_REPO), its work tree full; git's checkout is the fork at the same
commit with the same patches applied (``git status`` there compares the 5,800-file
tree with its index, as forkpatch's status does with its work tree). Rounds are
interleaved (one call of each in turn), figures are medians; the target is
<= 0.08 s wall for ``top`` and ``status`` (printed as MET or MISSED).

    python bench/bench_readonly.py [--rounds 10] [--workdir DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_real_apply import borrowed_checkout, fork_source, fresh_project
from common import (
    DEFAULT_WORKDIR,
    bench_env,
    forkpatch_argv,
    machine_info,
    print_machine,
    run,
    table,
    timed,
)

TARGET = 0.08  # seconds, wall, for top and status


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "readonly")
    ap.add_argument("--json", action="store_true", help="the figures as JSON on stdout")
    args = ap.parse_args(argv)
    fork = fork_source()
    if fork is None:
        return 2
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    env = bench_env(home=work / "home")
    fp = forkpatch_argv()
    project = fresh_project(work / "project")
    run([*fp, "--fork-repo", fork, "apply"], cwd=project, env=env)
    wt = project / ".forkpatch" / "worktree"
    head = run(["git", "rev-parse", "HEAD"], cwd=wt, env=env).stdout.decode().strip()
    # The same commits in a checkout of the fork: it borrows the store's objects.
    store = project / ".forkpatch" / "repo.git"
    checkout = borrowed_checkout(store, work / "checkout", head)
    calls = {
        "forkpatch top": ([*fp, "--fork-repo", fork, "top"], project),
        "forkpatch status": ([*fp, "--fork-repo", fork, "status"], project),
        "git status": (["git", "status", "--porcelain"], checkout),
    }
    seconds: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(args.rounds):
        for name, (argv_, cwd) in calls.items():
            t = timed(argv_, cwd=cwd, env=env)
            if t.rc != 0:
                raise SystemExit(f"{name} exited {t.rc}: {t.stderr.decode(errors='replace')}")
            seconds[name].append(t.seconds)
    medians = {name: statistics.median(v) for name, v in seconds.items()}
    info = machine_info()
    if args.json:
        print(json.dumps({"machine": info, "seconds": seconds, "medians": medians}, indent=2))
        return 0
    print_machine(info)
    git_s = medians["git status"]
    rows = [
        [
            name,
            f"{medians[name]:.3f}",
            f"{min(v):.3f}-{max(v):.3f}",
            f"{medians[name] / git_s:.1f}x",
            "-"
            if name == "git status"
            else f"<= {TARGET} s " + ("MET" if medians[name] <= TARGET else "MISSED"),
        ]
        for name, v in seconds.items()
    ]
    print(table(rows, ["command", "median s", "range", "/ git status", "target"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
