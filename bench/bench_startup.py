"""What each step of the edit loop and of a rebase pays before and besides its work: the
imports (``python -X importtime``) and the git processes it starts, on the real fork.

The project is the repository's own series (series.yaml + patches/) applied on the
fork (the fixture, or FORKPATCH_FORK_REPO) with a full work tree. Each command runs in
a state where it does its usual work:

* ``status`` and ``top`` on the applied stack (status reads its kept answer back);
* ``edit`` of the middle patch, a one-line change, ``refresh`` (the patches above it
  re-applied), ``pop`` and ``push`` of the top patch;
* ``rebase --onto UPSTREAM`` and ``rebase --continue``: UPSTREAM is the fork's main
  plus one commit (made in the project's store) that rewrites the line
  eager-block-cast removes, so the rebase stops there; the stop is resolved with the
  patch's side of each conflict region (untimed) and ``--continue`` finishes.

Imports: the total of ``-X importtime``'s top-level cumulative times, the minimum of
``--rounds`` runs (imports only get slower on a busy machine: the minimum is the
figure), and the heaviest top-level modules. The budget: ``status``, ``top`` and
``rebase --continue`` under 50 ms of imports (printed as MET or MISSED). Git processes:
counted by a logging ``git`` first on PATH (one untimed round; they do not depend on
the machine's load). ``--ab OLD/src`` measures another source tree in the same rounds
(``git archive <commit> src | tar -x -C /tmp/old``), for before/after figures.

    python bench/bench_startup.py [--rounds 7] [--ab /tmp/old/src] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_real_apply import fork_source, fresh_project
from bench_scale import _subcommands, git_shim
from common import DEFAULT_WORKDIR, REPO_ROOT, bench_env, machine_info, print_machine, rmtree, table

BUDGET_MS = 50.0
BUDGETED = ("status", "top", "rebase --continue")
MIDDLE = "odd-width-padding"
CONFLICTING = "vllm/utils/deep_gemm.py"
CONFLICT_LINE = "@torch.compile(dynamic=True, backend=current_platform.simple_compile_backend)\n"
EDITED = "vllm/model_executor/layers/quantization/online/fp8.py"
_LINE = re.compile(r"import time:\s+\d+ \|\s+(\d+) \| (\S.*)$")
_RUN = "import sys\nfrom forkpatch.entry import main\nsys.argv[0] = 'forkpatch'\nraise SystemExit(main())\n"


class Tree:
    """One forkpatch source tree: runs its CLI in a project (``src`` None: this one)."""

    def __init__(self, name: str, src: Path | None, fork: str, env: dict[str, str]) -> None:
        self.name, self.fork = name, fork
        self.env = dict(env)
        self.env["PYTHONPATH"] = str(src or REPO_ROOT / "src")
        self.env["FORKPATCH_FORK_REPO"] = fork

    def run(
        self, project: Path, *args: str, importtime: bool = False, path: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = dict(self.env)
        if path:
            env["PATH"] = f"{path}{os.pathsep}{env['PATH']}"
        argv = [sys.executable, *(["-X", "importtime"] if importtime else []), "-c", _RUN, *args]
        return subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True)


def imports(stderr: str) -> tuple[float, dict[str, float]]:
    """Total milliseconds of top-level imports and each top-level module's."""
    per: dict[str, float] = {}
    for line in stderr.splitlines():
        m = _LINE.match(line)
        if m and not m.group(2).startswith(" "):
            per[m.group(2)] = int(m.group(1)) / 1000
    return sum(per.values()), per


def bench_fork(fixture: str, dest: Path) -> tuple[str, str]:
    """A writable fork that borrows the fixture's objects (alternates, its shallow file
    and its refs), with one more commit on main that rewrites the line eager-block-cast
    removes, tagged ``bench-upstream``: the fork and that tag."""
    rmtree(dest)
    subprocess.run(["git", "init", "-q", "--bare", str(dest)], check=True)

    def git(*args: str, data: bytes | None = None, env: dict[str, str] | None = None) -> str:
        got = subprocess.run(
            ["git", f"--git-dir={dest}", *args],
            input=data,
            check=True,
            capture_output=True,
            env={**os.environ, **(env or {})},
        )
        return got.stdout.decode().strip()

    objects = Path(fixture).resolve() / "objects"
    (dest / "objects" / "info" / "alternates").write_text(f"{objects}\n")
    if (Path(fixture) / "shallow").is_file():
        (dest / "shallow").write_bytes((Path(fixture) / "shallow").read_bytes())
    refs = subprocess.run(
        ["git", f"--git-dir={fixture}", "for-each-ref", "--format=%(objectname) %(refname)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    (dest / "packed-refs").write_text("# pack-refs with: peeled\n" + refs)
    main_id = git("rev-parse", "main^{commit}")
    old = subprocess.run(
        ["git", f"--git-dir={dest}", "cat-file", "blob", f"{main_id}:{CONFLICTING}"],
        check=True,
        capture_output=True,
    ).stdout
    new = old.replace(CONFLICT_LINE.encode(), b"@torch.compile(dynamic=False)\n", 1)
    assert new != old, "the conflicting line is not in main"
    blob = git("hash-object", "-w", "--stdin", data=new)
    index = {"GIT_INDEX_FILE": str(dest / "bench-index")}
    git("read-tree", main_id, env=index)
    git("update-index", "--cacheinfo", f"100644,{blob},{CONFLICTING}", env=index)
    tree = git("write-tree", env=index)
    ident = {"GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@x", "GIT_COMMITTER_NAME": "u"}
    ident |= {"GIT_COMMITTER_EMAIL": "u@x", "GIT_AUTHOR_DATE": "@1700000000 +0000"}
    ident["GIT_COMMITTER_DATE"] = "@1700000000 +0000"
    commit = git("commit-tree", tree, "-p", main_id, "-m", "upstream edit", env=ident)
    git("update-ref", "refs/tags/bench-upstream", commit)
    return str(dest), "bench-upstream"


def resolve(project: Path) -> None:
    """Each conflict region of the stopped file becomes the patch's side."""
    path = project / ".forkpatch" / "rebase-worktree" / CONFLICTING
    out, side = [], None
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        if line.startswith("<<<<<<< "):
            side = "ours"
        elif line.startswith("||||||| ") and side == "ours":
            side = "base"
        elif line == "=======\n" and side in ("ours", "base"):
            side = "theirs"
        elif line.startswith(">>>>>>> ") and side == "theirs":
            side = None
        elif side in (None, "theirs"):
            out.append(line)
    path.write_text("".join(out), encoding="utf-8")


def steps(tree: Tree, project: Path, onto: str) -> list[tuple[str, list[str], Callable[[], None]]]:
    """(name, forkpatch arguments, what puts the project in the state it runs from)."""
    wt = project / ".forkpatch" / "worktree"

    def nothing() -> None:
        pass

    def change() -> None:
        with open(wt / EDITED, "a", encoding="utf-8") as fh:
            fh.write("# one more line\n")

    def stopped() -> None:
        _abort(tree, project)
        got = tree.run(project, "rebase", "--onto", onto)
        if got.returncode != 3:
            raise SystemExit(f"rebase --onto {onto} did not stop: {got.stderr[-600:]}")
        resolve(project)

    return [
        ("status", ["status"], nothing),
        ("top", ["top"], nothing),
        ("edit", ["edit", MIDDLE], nothing),
        ("refresh", ["refresh"], change),
        ("pop", ["pop"], nothing),
        ("push", ["push"], nothing),
        ("rebase --onto (stops)", ["rebase", "--onto", onto], lambda: _abort(tree, project)),
        ("rebase --continue", ["rebase", "--continue"], stopped),
    ]


def _abort(tree: Tree, project: Path) -> None:
    tree.run(project, "rebase", "--abort")
    tree.run(project, "apply", "--force")


def restore(tree: Tree, project: Path) -> None:
    """The repository's series as it is, applied: what the last round changed undone."""
    import shutil

    tree.run(project, "rebase", "--abort")
    shutil.copy2(REPO_ROOT / "series.yaml", project / "series.yaml")
    rmtree(project / "patches")
    shutil.copytree(REPO_ROOT / "patches", project / "patches")
    got = tree.run(project, "apply", "--force")
    if got.returncode != 0:
        raise SystemExit(f"apply --force ({tree.name}): {got.stderr[-600:]}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--ab", type=Path, help="another forkpatch source tree (its src/)")
    ap.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "startup")
    ap.add_argument("--json", action="store_true", help="the figures as JSON on stdout")
    args = ap.parse_args(argv)
    fork = fork_source()
    if fork is None:
        return 2
    work = args.workdir
    rmtree(work)
    work.mkdir(parents=True)
    env = bench_env(home=work / "home")
    fork, onto = bench_fork(fork, work / "fork.git")
    trees = [Tree("now", None, fork, env)]
    if args.ab:
        trees.append(Tree("ab", args.ab, fork, env))
    projects = {}
    for tree in trees:
        projects[tree.name] = fresh_project(work / f"project-{tree.name}")
    shim_dir, log = git_shim(work)
    ms: dict[str, dict[str, list[float]]] = {t.name: {} for t in trees}
    heavy: dict[str, dict[str, dict[str, float]]] = {t.name: {} for t in trees}
    git: dict[str, dict[str, dict[str, int]]] = {t.name: {} for t in trees}
    for rnd in range(args.rounds + 1):
        for tree in trees:  # interleaved: each round runs every tree's every step
            project = projects[tree.name]
            restore(tree, project)
            for name, fp_args, prepare in steps(tree, project, onto):
                prepare()
                if rnd == 0:  # the untimed round: git processes counted
                    log.write_text("")
                    got = tree.run(project, *fp_args, path=str(shim_dir))
                    git[tree.name][name] = _subcommands(log)
                else:
                    got = tree.run(project, *fp_args, importtime=True)
                    total, per = imports(got.stderr)
                    ms[tree.name].setdefault(name, []).append(total)
                    best = heavy[tree.name].get(name)
                    if best is None or total < sum(best.values()):
                        heavy[tree.name][name] = per
                if got.returncode not in (0, 3):
                    raise SystemExit(
                        f"{tree.name} {name}: exit {got.returncode}: {got.stderr[-800:]}"
                    )
    info = machine_info()
    result = {
        "machine": info,
        "imports_ms_min": {t: {n: min(v) for n, v in d.items()} for t, d in ms.items()},
        "imports_ms": ms,
        "git": git,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print_machine(info)
    names = [n for n, _a, _p in steps(trees[0], projects["now"], "")]
    rows = []
    for name in names:
        row = [name]
        for tree in trees:
            got_ms = min(ms[tree.name][name])
            row += [f"{got_ms:.1f}", str(sum(git[tree.name][name].values()))]
        if name in BUDGETED:
            now = min(ms["now"][name])
            row.append(f"<= {BUDGET_MS:.0f} ms " + ("MET" if now <= BUDGET_MS else "MISSED"))
        else:
            row.append("-")
        rows.append(row)
    headers = ["command"]
    for tree in trees:
        headers += [f"{tree.name} imports ms (min)", f"{tree.name} git processes"]
    print(table(rows, [*headers, "import budget"]))
    for name in names:
        per = heavy["now"][name]
        top = sorted(per.items(), key=lambda kv: -kv[1])[:6]
        subs = ", ".join(f"{k} {v}" for k, v in git["now"][name].items()) or "none"
        print(f"{name}: heaviest {', '.join(f'{m} {v:.1f}' for m, v in top)}; git: {subs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
