"""A real project's patch series carried across its upstream's releases, with its stops.

bench_small_series's stops are generated; this takes a series that a distribution
carries (OpenWrt's collectd patches, say) and the upstream repository it is carried
on, both fetched, and rebases the series onto each later release in turn, as the
distribution did: forkpatch warm (a project that applied the series), forkpatch cold
(a fresh project: CI's first run), git rebase and git am -3, one hop after another on
the same chain, in interleaved rounds.

The series is imported by forkpatch at the base release (untimed) and the commits it
applied are the series every tool starts from. A stop is resolved by a rule the same
for every tool: each conflict region keeps the upstream side (the patch's change to
those lines is dropped); a stop with no conflict region (a file deleted upstream, a
patch left empty) is skipped. Timed per tool: the start, each ``--continue`` (for git
with its ``git add``) and ``--skip``, the finish, and each hop's and the whole chain's
sum; after each hop the tools' trees are compared with git rebase's (where they differ,
the tool stopped or merged otherwise, and the table says so).

    python bench/bench_fetched_series.py --upstream UPSTREAM.git \\
        --patches-from PACKAGING.git:REV:PATH --base TAG --onto TAG,TAG,... [--rounds 3]

For example, OpenWrt's collectd patches as they were for 5.8.1, onto 5.9.0 ... 5.12.0
(the two repositories from ``fetch github:collectd/collectd`` and
``fetch github:openwrt/packages``; see RESULTS.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_small_series import (
    Forkpatch,
    GitAm,
    GitRebase,
    Run,
    Tool,
    say,
    settle_index,
    summary,
    target_line,
)
from common import (
    DEFAULT_WORKDIR,
    bench_env,
    forkpatch_argv,
    git,
    machine_info,
    rmtree,
    run,
    table,
    write_results,
)

WHOLE_TARGET = 1.2  # forkpatch / git rebase, the whole chain


def keep_upstream(path: Path) -> bytes | None:
    """``path`` with each conflict region resolved to its first side: the upstream's
    lines, for git rebase (HEAD) and forkpatch (the target) alike. None (skip the patch)
    where no region is found."""
    out: list[bytes] = []
    side = 0  # 0 outside a region, 1 in the first side, 2 in the others
    regions = 0
    for line in path.read_bytes().splitlines(keepends=True):
        if side == 0 and line.startswith(b"<<<<<<< "):
            side, regions = 1, regions + 1
        elif side == 1 and (line.startswith(b"||||||| ") or line.rstrip(b"\r\n") == b"======="):
            side = 2
        elif side and line.startswith(b">>>>>>> "):
            side = 0
        elif side in (0, 1):
            out.append(line)
    return b"".join(out) if regions else None


def patch_files(spec: str, dest: Path, env: dict[str, str]) -> list[Path]:
    """The patches named by ``REPO:REV:PATH`` (a directory of a packaging repository at a
    commit), in their ``series`` file's order where there is one, else by name (as
    OpenWrt and OpenEmbedded apply them)."""
    repo, rev, sub = spec.split(":", 2)
    rmtree(dest)
    dest.mkdir(parents=True)
    archive = run(["git", f"--git-dir={repo}", "archive", rev, sub], env=env).stdout
    run(["tar", "-x", "-C", str(dest)], input=archive, env=env)
    root = dest / sub
    series = root / "series"
    if series.is_file():
        names = [
            line.split()[0]
            for line in series.read_text().splitlines()
            if line.strip() and not line.startswith("#")
        ]
        return [root / n for n in names]
    return sorted(p for p in root.iterdir() if p.suffix in (".patch", ".diff"))


class Chain:
    """The series, its upstream and the hops; the template project made once."""

    def __init__(self, a: argparse.Namespace, work: Path, env: dict[str, str]) -> None:
        self.upstream, self.base, self.onto = str(a.upstream), a.base, a.onto.split(",")
        self.work, self.env = work, env
        self.fp = [*forkpatch_argv(), "--fork-repo", self.upstream]
        self.patches = patch_files(a.patches_from, work / "patches-in", env)
        self.template = work / "template"
        rmtree(self.template)
        self.template.mkdir(parents=True)
        fp = self.fp
        run(
            [*fp, "-q", "init", "--fork-url", self.upstream, "--base", self.base],
            cwd=self.template,
            env=env,
        )
        run([*fp, "-q", "import", *map(str, self.patches)], cwd=self.template, env=env)
        run([*fp, "-q", "apply"], cwd=self.template, env=env)
        self.series_head = git("rev-parse", "HEAD", cwd=self.worktree(self.template), env=env)
        self.count = len(
            git("rev-list", f"{self.base}..HEAD", cwd=self.worktree(self.template), env=env).split()
        )

    @staticmethod
    def worktree(project: Path) -> Path:
        return project / ".forkpatch" / "worktree"

    def git_clone(self, dest: Path, rev: str) -> None:
        rmtree(dest)
        run(
            ["git", "clone", "-q", "--shared", "--no-checkout", self.upstream, str(dest)],
            env=self.env,
        )
        wt = self.worktree(self.template)
        run(
            ["git", "fetch", "-q", str(wt), f"{self.series_head}:refs/heads/series"],
            cwd=dest,
            env=self.env,
        )
        run(["git", "checkout", "-q", "-f", "-B", "work", rev], cwd=dest, env=self.env)

    def project(self, dest: Path, *, apply: bool) -> None:
        rmtree(dest)
        dest.mkdir(parents=True)
        for name in ("series.yaml", "patches"):
            src = self.template / name
            run(["cp", "-a", str(src), str(dest / name)], env=self.env)
        if apply:
            run([*self.fp, "-q", "apply"], cwd=dest, env=self.env)
            settle_index(self.worktree(dest), self.env)

    def tools(self, hop: int) -> list[Tool]:
        """The tools for hop ``hop``: the first sets their directories up, the later ones
        go on from where the hop before left them."""
        prev = self.base if hop == 0 else self.onto[hop - 1]
        onto = self.onto[hop]
        first = hop == 0
        env, work = self.env, self.work

        def keep(_dest: Path) -> None:
            pass

        def cold(dest: Path) -> None:
            # Each hop a fresh project (CI's job on a new clone): the files the hop
            # before wrote, no store, no work trees.
            if first:
                self.project(dest, apply=False)
            else:
                rmtree(dest / ".forkpatch")

        mbox = work / "series.mbox"

        def am_setup(dest: Path) -> None:
            if first:
                self.git_clone(dest, "series")
            # The series as this tool left it, mailed onto the next release (untimed).
            text = run(
                ["git", "format-patch", "-q", "--stdout", f"{prev}..HEAD"], cwd=dest, env=env
            )
            mbox.write_bytes(text.stdout)
            run(["git", "checkout", "-q", "-f", "-B", "work", onto], cwd=dest, env=env)

        tools: list[Tool] = [
            GitRebase(
                work, env, (lambda d: self.git_clone(d, "series")) if first else keep, onto, prev
            ),
            Forkpatch(
                work,
                env,
                (lambda d: self.project(d, apply=True)) if first else keep,
                onto,
                "forkpatch warm",
            ),
            Forkpatch(work, env, cold, onto, "forkpatch cold"),
            GitAm(work, env, am_setup, mbox),
        ]
        for tool in tools:
            if isinstance(tool, Forkpatch):
                tool.fp = self.fp
        return tools


def bench(chain: Chain, rounds: int) -> dict[str, object]:
    names = [t.name for t in chain.tools(0)]
    hops: dict[str, list[list[Run]]] = {n: [] for n in names}  # per round, per hop
    differs: dict[str, set[str]] = {n: set() for n in names}
    for r in range(rounds):
        for n in names:
            hops[n].append([])
        for h, onto in enumerate(chain.onto):
            trees = {}
            for tool in chain.tools(h):
                os.sync()
                got = tool.go(keep_upstream)
                if got.error:
                    raise SystemExit(f"{onto}, round {r + 1}: {got.error}")
                hops[tool.name][-1].append(got)
                trees[tool.name] = got.tree
                steps = " + ".join(f"{t.seconds:.2f}" for _, t in got.steps)
                say(
                    f"    {onto:<16} {tool.name:<15} round {r + 1}/{rounds}: {got.seconds:6.2f}s ({steps})"
                )
            for n, tree in trees.items():
                if tree != trees["git rebase"]:
                    differs[n].add(onto)
    tools: dict[str, object] = {}
    for n in names:
        s = summary([run for chain_runs in hops[n] for run in chain_runs])
        s["whole"] = statistics.median(sum(x.seconds for x in rs) for rs in hops[n])
        s["runs"] = [round(sum(x.seconds for x in rs), 3) for rs in hops[n]]
        s["stops"] = sum(1 for x in hops[n][0] for k, _ in x.steps if k != "start")
        s["per_hop"] = [
            statistics.median(hops[n][r][h].seconds for r in range(rounds))
            for h in range(len(chain.onto))
        ]
        s["trees_differ"] = sorted(differs[n])
        tools[n] = s
    return {"tools": tools}


def report(chain: Chain, result: dict[str, object]) -> str:
    tools: dict[str, dict[str, object]] = result["tools"]  # type: ignore[assignment]
    git_s = tools["git rebase"]
    rows = []
    for name, s in tools.items():
        ratio = s["whole"] / git_s["whole"]  # type: ignore[operator]
        rows.append(
            [
                name,
                f"{s['whole']:.2f}",
                f"{min(s['runs']):.2f}-{max(s['runs']):.2f}",  # type: ignore[type-var]
                *(
                    f"{x:.2f}" if x is not None else "-"
                    for x in (s["start"], s["continue"], s["skip"], s["finish"])
                ),  # type: ignore[str-format]
                str(s["stops"]),
                f"{len(s['trees_differ'])} of {len(chain.onto)}",  # type: ignore[arg-type]
                f"{ratio:.2f}x",
            ]
        )
    head = (
        f"## {chain.count} patches, {chain.base} -> {' -> '.join(chain.onto)} "
        f"({len(chain.onto)} hops; medians per call over all hops)"
    )
    lines = [
        head,
        "",
        table(
            rows,
            [
                "tool",
                "whole s",
                "range",
                "start",
                "--continue",
                "--skip",
                "finish",
                "stops",
                "trees differ",
                "/ git rebase",
            ],
        ),
        "",
        "per hop (median s): "
        + "; ".join(
            f"{n}: " + " ".join(f"{x:.2f}" for x in s["per_hop"]) for n, s in tools.items()
        ),  # type: ignore[attr-defined]
    ]
    for name in ("forkpatch warm", "forkpatch cold"):
        lines.append(target_line(name, tools[name], git_s, WHOLE_TARGET))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", type=Path, required=True, help="the upstream's git directory")
    ap.add_argument(
        "--patches-from",
        required=True,
        help="REPO:REV:PATH, the series' directory in a packaging repository at a commit",
    )
    ap.add_argument("--base", required=True, help="the release the series was made for")
    ap.add_argument("--onto", required=True, help="the later releases, comma-separated, in order")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--think", type=float, default=Tool.think, help="untimed pause at each stop")
    ap.add_argument("--json", action="store_true", help="the results as JSON on stdout")
    ap.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "fetched-series")
    a = ap.parse_args(argv)
    Tool.think = a.think
    work: Path = a.workdir
    work.mkdir(parents=True, exist_ok=True)
    env = bench_env(home=work / "home")
    info = machine_info()
    say("machine: " + ", ".join(f"{k}={v}" for k, v in info.items()))
    chain = Chain(a, work, env)
    say(f"## {chain.count} patches from {a.patches_from} on {a.upstream}")
    result = bench(chain, a.rounds)
    text = report(chain, result)
    print(text + "\n", file=sys.stderr if a.json else sys.stdout, flush=True)
    doc = {
        "machine": info,
        "rounds": a.rounds,
        "args": {k: str(v) for k, v in vars(a).items()},
        **result,
    }
    write_results("fetched_series.json", doc, to_stdout=a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
