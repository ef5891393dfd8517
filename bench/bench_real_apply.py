"""Apply the repository's own series to the real fork: ``forkpatch apply --sparse``
vs ``forkpatch apply`` (full work tree) vs ``git am`` on an existing checkout.

The target: ``forkpatch apply --sparse`` on the real fork at least as fast
as ``git am`` of the same series on an existing checkout of the fork.

* forkpatch apply --sparse  a fresh project (series.yaml + patches/, no .forkpatch/):
                            store, in-memory apply, fast-import, a work tree with the
                            root files and the directories the series touches;
* forkpatch apply           the same with a full work tree (the default);
* git am                    a work tree of the fork at the base, checked out before the
                            timing (untimed: what "an existing checkout" means), then
                            ``git am`` of the series as an mbox (the same commits
                            forkpatch makes, from ``git format-patch``; the build step,
                            an empty commit, is left out).

Every run is checked: the tree each tool ends with must be the same.
The fork is FORKPATCH_FORK_REPO or ../shared/fixtures/1cat-vllm.git. Like the
fixture, it is only read (the clones for git am borrow its objects).

    python bench/bench_real_apply.py [--reps 5] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    DEFAULT_WORKDIR,
    REPO_ROOT,
    Measure,
    Timing,
    bench_env,
    forkpatch_argv,
    machine_info,
    print_machine,
    repeat,
    rmtree,
    run,
    table,
    timed,
)

FIXTURE = REPO_ROOT.parent / "shared" / "fixtures" / "1cat-vllm.git"


def _git(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env or bench_env(), check=True, capture_output=True, text=True
    ).stdout.strip()


def fork_source() -> str | None:
    """The fork to read (FORKPATCH_FORK_REPO, else the fixture); None, said on stderr,
    when there is none."""
    fork = os.environ.get("FORKPATCH_FORK_REPO") or str(FIXTURE)
    if not Path(fork).is_dir():
        print(f"no fork repository at {fork}: set FORKPATCH_FORK_REPO", file=sys.stderr)
        return None
    return fork


def fresh_project(dest: Path) -> Path:
    rmtree(dest)
    dest.mkdir(parents=True)
    shutil.copy2(REPO_ROOT / "series.yaml", dest / "series.yaml")
    shutil.copytree(REPO_ROOT / "patches", dest / "patches")
    return dest


def borrowed_checkout(fork: Path, dest: Path, commit: str) -> Path:
    """A non-bare repository that borrows the fork's objects, checked out at ``commit``.

    A clone goes through git's transport, which the fixture (shallow, with
    placeholder blobs) cannot serve; alternates + the shallow file is what a
    clone with ``--shared`` amounts to.
    """
    rmtree(dest)
    _git("init", "-q", str(dest))
    git_dir = dest / ".git"
    objects = Path(_git("--git-dir", str(fork), "rev-parse", "--git-path", "objects", cwd=fork))
    objects = objects if objects.is_absolute() else (fork / objects)
    (git_dir / "objects" / "info" / "alternates").write_text(f"{objects.resolve()}\n")
    shallow = Path(fork) / "shallow"
    if shallow.is_file():
        shutil.copy2(shallow, git_dir / "shallow")
    _git("checkout", "-q", "-f", "--detach", commit, cwd=dest)
    return dest


def mark_placeholders(dest: Path, env: dict[str, str]) -> None:
    """The fixture's placeholder blobs (fixtures/README.md) hash to other ids than the
    tree names: git sees those files as changed whenever it re-reads them, and a rebase
    or a move refuses. Marked unchanged, untimed, as a checkout of the real fork is."""
    staged = run(["git", "ls-files", "-s", "-z", "--", "docs"], cwd=dest, env=env).stdout
    entries = [e.decode().split("\t", 1) for e in staged.split(b"\0") if e]
    names = "\n".join(path for _, path in entries).encode()
    hashed = run(["git", "hash-object", "--stdin-paths"], cwd=dest, env=env, input=names)
    paths = [
        path
        for (meta, path), oid in zip(entries, hashed.stdout.decode().split(), strict=True)
        if meta.split()[1] != oid
    ]
    if paths:
        run(["git", "update-index", "--assume-unchanged", "--", *paths], cwd=dest, env=env)


def series_mbox(fork: str, work: Path) -> tuple[Path, str, str]:
    """The series as an mbox (from forkpatch's own commits), its base and result tree."""
    project = fresh_project(work / "mbox-project")
    subprocess.run(
        [*forkpatch_argv(), "--fork-repo", fork, "apply", "--sparse"],
        cwd=project,
        env=bench_env(),
        check=True,
        capture_output=True,
    )
    wt = project / ".forkpatch" / "worktree"
    # The base commit from series.yaml (state.json is forkpatch's sealed private state).
    import yaml

    base = yaml.safe_load((project / "series.yaml").read_text())["base"]["commit"]
    commits = _git("rev-list", "--reverse", f"{base}..HEAD", cwd=wt).split()
    real = [c for c in commits if _git("diff-tree", "--no-commit-id", "-r", c, cwd=wt)]
    mbox = work / "series.mbox"
    with open(mbox, "wb") as fh:
        for c in real:
            fh.write(
                subprocess.run(
                    ["git", "format-patch", "--stdout", "-1", c],
                    cwd=wt,
                    env=bench_env(),
                    check=True,
                    capture_output=True,
                ).stdout
            )
    return mbox, base, _git("rev-parse", "HEAD^{tree}", cwd=wt)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "real-apply")
    args = ap.parse_args(argv)
    fork = fork_source()
    if fork is None:
        return 2
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    info = machine_info()
    print_machine(info)
    print(f"fork: {fork}")
    mbox, base, want_tree = series_mbox(fork, work)
    fp = forkpatch_argv()

    def check_project(ctx: object, t: Timing, _i: int) -> tuple[bool, str]:
        if t.rc != 0:
            return False, t.stderr.decode(errors="replace")[-300:]
        wt = Path(str(ctx)) / ".forkpatch" / "worktree"
        tree = _git("rev-parse", "HEAD^{tree}", cwd=wt)
        files = len(_git("ls-files", "-t", cwd=wt).splitlines())
        present = sum(1 for ln in _git("ls-files", "-t", cwd=wt).splitlines() if ln[0] == "H")
        clean = _git("status", "--porcelain", cwd=wt) == ""
        ok = tree == want_tree and clean
        return ok, f"{present}/{files} files checked out" + ("" if clean else ", status not clean")

    def check_am(ctx: object, t: Timing, _i: int) -> tuple[bool, str]:
        if t.rc != 0:
            return False, t.stderr.decode(errors="replace")[-300:]
        ok = _git("rev-parse", "HEAD^{tree}", cwd=Path(str(ctx))) == want_tree
        return ok, ""

    tools = [
        (
            "forkpatch apply --sparse",
            "forkpatch --fork-repo FORK apply --sparse",
            lambda i: fresh_project(work / f"sparse{i}"),
            lambda ctx: timed([*fp, "--fork-repo", fork, "apply", "--sparse"], cwd=Path(str(ctx))),
            check_project,
        ),
        (
            "forkpatch apply",
            "forkpatch --fork-repo FORK apply",
            lambda i: fresh_project(work / f"full{i}"),
            lambda ctx: timed([*fp, "--fork-repo", fork, "apply"], cwd=Path(str(ctx))),
            check_project,
        ),
        (
            "git am",
            "git am series.mbox (existing checkout at the base)",
            lambda i: borrowed_checkout(Path(fork), work / f"am{i}", base),
            lambda ctx: timed(["git", "am", "-q", str(mbox)], cwd=Path(str(ctx))),
            check_am,
        ),
    ]
    # Interleaved (one run of each tool per round), so that a change of the
    # machine's load during the benchmark falls on every tool alike.
    by_tool = {name: Measure(name, command) for name, command, *_ in tools}
    for i in range(args.reps):
        for name, _command, prepare, measure, verify in tools:
            m = by_tool[name]
            one = repeat(
                name,
                m.command,
                1,
                prepare=lambda _j, prepare=prepare, i=i: prepare(i),
                measure=measure,
                verify=verify,
                cleanup=lambda ctx: rmtree(Path(str(ctx))),
            )
            m.runs += one.runs
            m.cpus += one.cpus
            m.ok = m.ok and one.ok
            m.note = one.note or m.note
    measures = list(by_tool.values())
    am = measures[-1]
    rows = [
        [
            m.tool,
            f"{m.median:.2f}",
            m.spread(),
            f"{m.cpu:.2f}",
            f"{am.median / m.median:.2f}x" if m is not am else "-",
            "ok" if m.ok else "FAILED",
            m.note,
        ]
        for m in measures
    ]
    print()
    print(table(rows, ["tool", "wall s", "range", "cpu s", "git am / tool", "check", "note"]))
    sparse = measures[0]
    verdict = "MET" if sparse.median <= am.median else "MISSED"
    print(
        f"target: forkpatch apply --sparse <= git am on an existing checkout: "
        f"git am / apply --sparse = {am.median / sparse.median:.2f}x -> {verdict}"
    )
    out = REPO_ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / "real_apply.json").write_text(
        json.dumps(
            {"machine": info, "fork": fork, "results": [m.to_json() for m in measures]}, indent=2
        )
    )
    return 0 if all(m.ok for m in measures) else 1


if __name__ == "__main__":
    sys.exit(main())
