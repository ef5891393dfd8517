"""A clean work tree moved to a commit N files away: forkpatch's in-process move
(``forkpatch.stack.worktree.move``) against ``git reset --hard``, on twin checkouts of
the fork's v1.2.1 tree (FORKPATCH_FORK_REPO or the fixture, only read), linked work
trees of one private store as forkpatch's editing tree is.

For each N a commit on v1.2.1 that changes N of its Python files is made; each tool
moves its checkout there and back, in turn, ``--rounds`` times. Medians per move. What
it decides: how many paths ``MOVE_IN_PROCESS_PATHS`` lets the in-process move take
before ``reset --hard`` is the cheaper of the two.

    python bench/bench_move.py [--sizes 5,20,50,100,200] [--rounds 3] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_real_apply import fork_source, mark_placeholders
from common import DEFAULT_WORKDIR, REPO_ROOT, bench_env, git, machine_info, print_machine, rmtree

sys.path.insert(0, str(REPO_ROOT / "src"))
from forkpatch.git import Git
from forkpatch.stack import worktree
from forkpatch.stackstate import Layout

BASE = "v1.2.1"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="5,20,50,100,200")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "move")
    a = ap.parse_args()
    fork = fork_source()
    if fork is None:
        return 2
    print_machine(machine_info())
    commit = git(f"--git-dir={fork}", "rev-parse", f"{BASE}^{{commit}}")
    store_dir = a.workdir / "store.git"  # as forkpatch's: a private store, linked work trees
    rmtree(a.workdir)
    git("init", "-q", "--bare", str(store_dir))
    objects = Path(git("--git-dir", fork, "rev-parse", "--git-path", "objects", cwd=Path(fork)))
    objects = objects if objects.is_absolute() else Path(fork) / objects
    (store_dir / "objects" / "info" / "alternates").write_text(f"{objects.resolve()}\n")
    if (Path(fork) / "shallow").is_file():
        shutil.copy2(Path(fork) / "shallow", store_dir / "shallow")
    ours_dir, theirs_dir = a.workdir / "ours", a.workdir / "theirs"
    for d in (ours_dir, theirs_dir):
        git("worktree", "add", "-q", "-f", "--detach", str(d), commit, cwd=store_dir)
        mark_placeholders(d, bench_env())
    time.sleep(1.1)  # files no longer racily clean: each status below reads none whole
    for d in (ours_dir, theirs_dir):
        git("status", "--porcelain", cwd=d)
    ours = worktree.open_worktree(ours_dir)
    store = Git(store_dir)
    objects = store.objects
    base = commit
    tree = objects.tree_id(base)
    files = sorted(
        p for p, (m, _o) in ours.ls_tree(base).items() if m == "100644" and p.endswith(".py")
    )
    limit = worktree.MOVE_IN_PROCESS_PATHS
    worktree.MOVE_IN_PROCESS_PATHS = 1 << 30  # the in-process move at every size
    print("| paths | in process, median ms | git reset --hard, median ms | in process / git |")
    print("|---|---|---|---|")
    for n in (int(x) for x in a.sizes.split(",") if x):
        picked = files[:: max(1, len(files) // n)][:n]
        edits = {
            p: ("100644", objects.write_blob(f"# moved {n} {i}\n".encode()))
            for i, p in enumerate(picked)
        }
        target = store.commit_tree(objects.write_tree(tree, edits), [base], f"{n} files")
        mine: list[float] = []
        gits: list[float] = []
        for _ in range(a.rounds):
            for to in (target, base):
                t = time.perf_counter()
                if not worktree.move(ours, store, to, Layout()):
                    raise SystemExit(f"the in-process move left {n} paths to git")
                mine.append(time.perf_counter() - t)
                t = time.perf_counter()
                git("reset", "-q", "--hard", to, cwd=theirs_dir)
                gits.append(time.perf_counter() - t)
        if git("status", "--porcelain", cwd=ours_dir):
            raise SystemExit("the in-process move left the tree unlike its HEAD")
        m, g = statistics.median(mine) * 1000, statistics.median(gits) * 1000
        print(f"| {n} | {m:.1f} | {g:.1f} | {m / g:.2f}x |")
    print(f"(forkpatch moves in process up to {limit} paths)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
