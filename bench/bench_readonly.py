"""Read-only commands on the real fork: ``forkpatch top`` and ``forkpatch status``
against ``git status`` in a checkout of the fork.

What a developer runs between edits, many times a day. The project is the
repository's own series (series.yaml + patches/) applied on the fork (the fixture,
or FORKPATCH_FORK_REPO), its work tree full; git's checkout is the fork at the same
commit with the same patches applied (``git status`` there compares the 5,800-file
tree with its index, as forkpatch's status does with its work tree). Rounds are
interleaved (one call of each in turn), figures are medians; the target is
<= 0.08 s wall for ``top`` and ``status`` (printed as MET or MISSED). The CPU time
(user + system of the command and its git) is printed beside: on a loaded machine it
moves less than the wall time.

``--ab OLD/src`` runs another source tree's ``top`` and ``status`` in the same
interleaved rounds, on a project of its own (the kept answers are keyed by the code);
both trees then run as ``python -c`` with their ``src`` on PYTHONPATH (what the console
script does), for before/after figures:

    git archive <commit> src | tar -x -C /tmp/old
    python bench/bench_readonly.py [--rounds 10] [--ab /tmp/old/src] [--workdir DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
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
_RUN = "import sys\nfrom forkpatch.entry import main\nsys.argv[0] = 'forkpatch'\nraise SystemExit(main())\n"


def _compiled(src: Path) -> None:
    """The tree's bytecode written (PYTHONDONTWRITEBYTECODE would compile it on every call)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], env=env, check=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "readonly")
    ap.add_argument("--json", action="store_true", help="the figures as JSON on stdout")
    ap.add_argument("--ab", type=Path, help="another forkpatch source tree (its src/)")
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
    trees: dict[str, tuple[list[str], Path, dict[str, str]]] = {"forkpatch": (fp, project, env)}
    if args.ab:
        now_src = Path(__file__).resolve().parent.parent / "src"
        old_project = fresh_project(work / "project-ab")
        for src in (now_src, args.ab):
            _compiled(src)
        py = [sys.executable, "-c", _RUN]
        trees = {
            "forkpatch": (py, project, {**env, "PYTHONPATH": str(now_src)}),
            "ab": (py, old_project, {**env, "PYTHONPATH": str(args.ab)}),
        }
        run([*py, "--fork-repo", fork, "apply"], cwd=old_project, env=trees["ab"][2])
    calls: dict[str, tuple[list[str], Path, dict[str, str]]] = {}
    for tree, (argv0, where, tree_env) in trees.items():
        calls[f"{tree} top"] = ([*argv0, "--fork-repo", fork, "top"], where, tree_env)
        calls[f"{tree} status"] = ([*argv0, "--fork-repo", fork, "status"], where, tree_env)
    calls["git status"] = (["git", "status", "--porcelain"], checkout, env)
    for argv_, cwd, call_env in calls.values():  # the kept answers made, untimed
        run(argv_, cwd=cwd, env=call_env)
    seconds: dict[str, list[float]] = {name: [] for name in calls}
    cpu: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(args.rounds):
        for name, (argv_, cwd, call_env) in calls.items():
            t = timed(argv_, cwd=cwd, env=call_env)
            if t.rc != 0:
                raise SystemExit(f"{name} exited {t.rc}: {t.stderr.decode(errors='replace')}")
            seconds[name].append(t.seconds)
            cpu[name].append(t.cpu)
    medians = {name: statistics.median(v) for name, v in seconds.items()}
    cpu_medians = {name: statistics.median(v) for name, v in cpu.items()}
    info = machine_info()
    if args.json:
        doc = {"machine": info, "seconds": seconds, "medians": medians, "cpu": cpu_medians}
        print(json.dumps(doc, indent=2))
        return 0
    print_machine(info)
    git_s = medians["git status"]
    rows = [
        [
            name,
            f"{medians[name]:.3f}",
            f"{min(v):.3f}-{max(v):.3f}",
            f"{medians[name] / git_s:.1f}x",
            f"{cpu_medians[name]:.3f}",
            "-"
            if name == "git status" or name.startswith("ab ")
            else f"<= {TARGET} s " + ("MET" if medians[name] <= TARGET else "MISSED"),
        ]
        for name, v in seconds.items()
    ]
    headers = ["command", "median s", "range", "/ git status", "cpu s (median)", "target"]
    print(table(rows, headers))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
