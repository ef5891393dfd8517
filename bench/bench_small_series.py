"""Small series on small and real trees: forkpatch rebase vs git rebase vs git am -3.

The common case: a series of 10-30 patches on a tree of 1,000-3,000 files, rebased
onto an upstream release that conflicts with a few of them, each stop resolved by
hand. Every tool does the same work and ends on the same tree (checked after each
round). Scenarios:

* ``stops``   a generated tree (``--files``, 2,000) with ``--patches`` (20) patches
              and an upstream of ``--drift`` (2) commits that move the patched files
              and ``--conflicts`` (6) commits that each change a line one patch
              changes. Each stop is resolved by writing the resolved bytes of the
              conflicting file from a table made with the data (untimed, the same
              bytes for every tool); the middle conflicting patch is dropped instead
              (``--skip``), by every tool;
* ``nostop``  the same series onto the drift alone: no stop;
* ``real``    the repository's own series (patches/, series.yaml) onto the fork's
              v1.3.0 (the fixture, or FORKPATCH_FORK_REPO), forkpatch ``cold`` (a
              fresh project: CI's first run) and ``warm`` (a project that applied
              the series before: its store and editing work tree exist, and the
              rebase moves the work tree too).

Timed, per tool: the start, each ``--continue`` (for git, with the ``git add`` of the
resolved files) and ``--skip``, and the finish (the call that ends the rebase), and
the whole. forkpatch is timed cold (a project without ``.forkpatch/``) and warm (one
that applied the series and has rebased before, as git's clone has its checkout);
git rebase runs in a clone with the series checked out, git am -3 in one at the new
base. The rounds are interleaved (one run of each tool in turn) so that the load
falls on every tool alike; figures are medians, with the load average beside them.

``--ab SRC`` adds forkpatch rows run from another source tree (``git archive <commit>
src | tar -x -C /tmp/old``, then ``--ab /tmp/old/src``), in the same interleaved rounds.
``--count-git`` adds one untimed round of forkpatch with a logging ``git`` first on
PATH and prints the git processes of each call (``--profile DIR`` writes a cProfile
of each call there, its modules imported first as the command server has them:
``profile_served.py``). ``--think S`` puts an untimed pause between a stop and its
resolution, as a person's reading of the stop (default 1.05 s; ``--think 0`` for
none). A resolution written in the same second as the files the tool wrote at the
stop is "racily clean" to git, which then reads every file the stop wrote again, in
each call within that second: without a pause `git rebase`'s own `--continue` calls
paid that (0.15-0.18 s where they take 0.04-0.05 s a second later), and so did a cold
forkpatch's, whose conflict work tree is written whole at the first stop. No person
resolves a conflict that fast; the figures in RESULTS.md from 2026-12-03 (afternoon)
on are taken with the pause.

    python bench/bench_small_series.py [--rounds 5] [--scenarios stops,nostop,real]
        [--files 2000] [--patches 20] [--conflicts 6] [--think 1.05] [--count-git]
        [--json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_real_apply import FIXTURE, borrowed_checkout, mark_placeholders, series_mbox
from bench_real_apply import fresh_project as own_series_project
from bench_scale import _subcommands, git_shim
from common import (
    DEFAULT_WORKDIR,
    Timing,
    bench_env,
    forkpatch_argv,
    git,
    machine_info,
    rmtree,
    run,
    table,
    timed,
    write_results,
)

BASE = "v1.0"
STOPS_TAG = "v1.1"
NOSTOP_TAG = "v1.1-nostop"
REAL_BASE = "v1.2.1"
REAL_ONTO = "v1.3.0"
STOPPED = 3  # forkpatch's exit status at a conflict
# forkpatch / git rebase, whole: (warm, cold) per scenario
TARGETS = {"stops": (1.2, 1.2), "nostop": (1.2, 1.2), "real": (0.5, 0.6)}
CONTINUE_TARGET = 0.10  # seconds per forkpatch `rebase --continue` / `--skip`
ENDS_TARGET = 1.5  # forkpatch's first and finishing call / git rebase's


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


# --------------------------------------------------------------------------- the data


@dataclass(frozen=True)
class Sizes:
    files: int
    patches: int
    conflicts: int
    drift: int


def _module(f: int) -> str:
    return f"pkg/d{f % 40:02d}/m{f:05d}.py"


def _lines(f: int) -> list[str]:
    return [f"v_{f}_{j} = {j}  # line {j} of module {f}" for j in range(40 + f % 60)]


def _text(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode()


COMMON = "pkg/common.py"


@dataclass
class Data:
    """The generated fork (a bare repository), the series as patch files and an mbox,
    and the resolution of each conflicting file (its bytes, or None: drop the patch)."""

    fork: Path
    patches: Path
    mbox: Path
    resolutions: dict[str, bytes | None] = field(default_factory=dict)


class _Stream:
    """A fast-import stream of whole-file commits."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.marks = 0

    def commit(
        self, ref: str, message: str, files: dict[str, bytes], parent: int | None = None
    ) -> int:
        self.marks += 1
        msg = message.encode()
        self.out += f"commit {ref}\nmark :{self.marks}\n".encode()
        self.out += b"author Bench <bench@example.invalid> 1700000000 +0000\n"
        self.out += b"committer Bench <bench@example.invalid> 1700000000 +0000\n"
        self.out += f"data {len(msg)}\n".encode() + msg + b"\n"
        if parent is not None:
            self.out += f"from :{parent}\n".encode()
        for path, data in sorted(files.items()):
            self.out += f"M 100644 inline {path}\ndata {len(data)}\n".encode() + data + b"\n"
        self.out += b"\n"
        return self.marks

    def tag(self, name: str, mark: int) -> None:
        self.out += f"reset refs/tags/{name}\nfrom :{mark}\n\n".encode()


def make_data(work: Path, sizes: Sizes) -> Data:
    """Generate the fork, the series and the resolutions (cached by size)."""
    key = f"f{sizes.files}-p{sizes.patches}-c{sizes.conflicts}-d{sizes.drift}"
    root = work / f"data-{key}"
    done = root / "resolutions.json"
    data = Data(root / "fork.git", root / "patches", root / "series.mbox")
    if done.is_file():
        table_ = json.loads(done.read_text())
        data.resolutions = {p: None if t is None else t.encode() for p, t in table_.items()}
        return data
    rmtree(root)
    root.mkdir(parents=True)
    files = {_module(f): _lines(f) for f in range(sizes.files)}
    files[COMMON] = [f"c_{j} = {j}" for j in range(12 * sizes.patches + 20)]
    s = _Stream()
    base = s.commit(
        "refs/heads/main", "the fork at v1.0\n", {p: _text(v) for p, v in files.items()}
    )
    s.tag(BASE, base)

    # The series: patch i changes lines 20 and 30 of its own module; every third one
    # also a line of the shared module, 12 lines from the next one's.
    own = [_module((i * 7919 + 13) % sizes.files) for i in range(sizes.patches)]
    if len(set(own)) != len(own):
        raise SystemExit("--files too small for --patches")
    step = max(1, sizes.patches // sizes.conflicts)
    conflicting = [min(sizes.patches - 1, k * step + step // 2) for k in range(sizes.conflicts)]
    patched: dict[str, list[str]] = {p: list(files[p]) for p in [*own, COMMON]}
    head = base
    for i, path in enumerate(own):
        lines = patched[path]
        lines[20] = lines[20].replace(" = 20", f" = 20 + {1000 * (i + 1)}")
        lines[30] = lines[30].replace(" = 30", f" = 30 - {i + 1}")
        change = {path: _text(lines)}
        if i % 3 == 0:
            patched[COMMON][12 * i + 10] += f"  # patch {i}"
            change[COMMON] = _text(patched[COMMON])
        head = s.commit("refs/heads/series", f"patch {i:02d}: tune {path}\n", change, head)

    # Upstream: drift commits (other modules, and three lines on top of some patched
    # ones: offsets), then one commit per conflicting patch on its line 20.
    upstream = {p: list(v) for p, v in files.items()}
    head = base
    for d in range(sizes.drift):
        change = {}
        for f in range(d, sizes.files, max(1, sizes.files // 40)):
            path = _module(f)
            upstream[path] = [*upstream[path], f"drift_{d} = {d}"]
            change[path] = _text(upstream[path])
        for path in own[d::4]:
            upstream[path] = [f"# upstream header {d}.{k}" for k in range(3)] + upstream[path]
            change[path] = _text(upstream[path])
        upstream[COMMON] = [f"# upstream note {d}", *upstream[COMMON]]
        change[COMMON] = _text(upstream[COMMON])
        head = s.commit("refs/heads/upstream", f"upstream drift {d}\n", change, head)
    s.tag(NOSTOP_TAG, head)
    for k, i in enumerate(conflicting):
        path = own[i]
        at = next(
            n for n, line in enumerate(upstream[path]) if line.startswith(f"v_{path_f(path)}_20 ")
        )
        upstream[path][at] += f"  # upstream fix {k}"
        head = s.commit(
            "refs/heads/upstream", f"upstream fix {k}\n", {path: _text(upstream[path])}, head
        )
        # Resolved: upstream's file with the patch's two changes (and the fix kept).
        resolved = list(upstream[path])
        resolved[at] = resolved[at].replace(" = 20 ", f" = 20 + {1000 * (i + 1)} ")
        resolved[at + 10] = resolved[at + 10].replace(" = 30", f" = 30 - {i + 1}")
        data.resolutions[path] = None if k == sizes.conflicts // 2 else _text(resolved)
    s.tag(STOPS_TAG, head)

    run(["git", "init", "-q", "--bare", str(data.fork)])
    run(["git", "fast-import", "--quiet"], cwd=data.fork, input=bytes(s.out))
    gd = f"--git-dir={data.fork}"
    run(["git", gd, "format-patch", "-q", "-o", str(data.patches), f"{BASE}..series"])
    mbox = run(["git", gd, "format-patch", "--stdout", f"{BASE}..series"]).stdout
    data.mbox.write_bytes(mbox)
    table_ = {p: None if b is None else b.decode() for p, b in data.resolutions.items()}
    done.write_text(json.dumps(table_, indent=1) + "\n")
    return data


def path_f(path: str) -> int:
    return int(path.rsplit("/m", 1)[1][:-3])


# --------------------------------------------------------------------------- the tools


#: How a stop is resolved: the resolved bytes of each conflicting file (None: the
#: patch is skipped), from a table or from a rule given the file's path.
Resolutions = dict[str, bytes | None] | Callable[[Path], bytes | None]


@dataclass
class Run:
    """One tool's timed calls in one round: (kind, timing) with kind start, continue,
    skip; the last call is also the finish."""

    steps: list[tuple[str, Timing]] = field(default_factory=list)
    tree: str = ""
    error: str = ""

    @property
    def seconds(self) -> float:
        return sum(t.seconds for _, t in self.steps)

    @property
    def cpu(self) -> float:
        return sum(t.cpu for _, t in self.steps)


class Tool:
    """A tool's way through a rebase: start, the stops (resolved from the table) and
    the end. Subclasses say how to start, continue and skip and where the files are."""

    name = ""
    limit = 40
    #: Seconds between a stop and its resolution, untimed (``--think``: see the module).
    think = 1.05

    def __init__(self, work: Path, env: dict[str, str]) -> None:
        self.work, self.env = work, env

    # per tool
    def prepare(self) -> None: ...
    def start(self) -> Timing: ...
    def stopped(self, t: Timing) -> bool:
        return t.rc != 0

    def tree_dir(self) -> Path: ...
    def in_progress(self) -> bool:
        return True

    def resume(self, files: list[str]) -> list[Timing]: ...
    def skip(self) -> Timing: ...
    def result_tree(self) -> str: ...

    def t(self, argv: list[str], cwd: Path) -> Timing:
        return timed(argv, cwd=cwd, env=self.env)

    def marked(self) -> list[str]:
        """The files holding conflict markers (found untimed, as a person greps)."""
        root = self.tree_dir()
        out = run(["git", "diff", "--name-only", "-z", "HEAD"], cwd=root, env=self.env).stdout
        return [
            p.decode()
            for p in sorted(set(out.split(b"\0")) - {b""})
            if (root / p.decode()).is_file()
            and b"\n<<<<<<< " in b"\n" + (root / p.decode()).read_bytes()
        ]

    def go(self, resolutions: Resolutions) -> Run:
        self.prepare()
        os.sync()  # what the setup wrote is on disk before the clock starts, for every tool
        result = Run()
        t = self.start()
        result.steps.append(("start", t))
        while self.stopped(t) and len(result.steps) < self.limit:
            time.sleep(self.think)
            files = self.marked()
            if callable(resolutions):  # a rule, applied to the file as the tool left it
                table = {f: resolutions(self.tree_dir() / f) for f in files}
            else:
                table = resolutions
            unknown = [f for f in files if f not in table]
            if unknown:
                result.error = f"{self.name}: a conflict the table does not know: {unknown}"
                return result
            if not files and not self.in_progress():
                result.error = (
                    f"{self.name}: exit {t.rc}, not stopped: "
                    + (t.stderr + t.stdout).decode(errors="replace")[-600:]
                )
                return result
            if not files or any(table[f] is None for f in files):
                t = self.skip()
                result.steps.append(("skip", t))
                continue
            for f in files:
                (self.tree_dir() / f).write_bytes(table[f] or b"")
            timings = self.resume(files)
            t = timings[-1]
            merged = Timing(sum(x.seconds for x in timings), t.rc, cpu=sum(x.cpu for x in timings))
            merged.stdout, merged.stderr = t.stdout, t.stderr
            result.steps.append(("continue", merged))
            t = merged
        if t.rc != 0:
            result.error = (
                f"{self.name}: exit {t.rc}: "
                + (t.stderr + t.stdout).decode(errors="replace")[-600:]
            )
            return result
        result.tree = self.result_tree()
        return result


class GitRebase(Tool):
    name = "git rebase"

    def __init__(
        self, work: Path, env: dict[str, str], setup: Callable[[Path], None], onto: str, base: str
    ) -> None:
        super().__init__(work, env)
        self.dir, self.setup, self.onto, self.base = work / "git-rebase", setup, onto, base

    def prepare(self) -> None:
        self.setup(self.dir)

    def start(self) -> Timing:
        return self.t(["git", "rebase", "-q", "--onto", self.onto, self.base], self.dir)

    def tree_dir(self) -> Path:
        return self.dir

    def in_progress(self) -> bool:
        state = git("rev-parse", "--git-path", "rebase-merge", cwd=self.dir, env=self.env)
        return (self.dir / state).is_dir()

    def resume(self, files: list[str]) -> list[Timing]:
        add = self.t(["git", "add", "--", *files], self.dir)
        return [add, self.t(["git", "rebase", "--continue"], self.dir)]

    def skip(self) -> Timing:
        return self.t(["git", "rebase", "--skip"], self.dir)

    def result_tree(self) -> str:
        return git("rev-parse", "HEAD^{tree}", cwd=self.dir, env=self.env)


class GitAm(GitRebase):
    name = "git am -3"

    def __init__(
        self, work: Path, env: dict[str, str], setup: Callable[[Path], None], mbox: Path
    ) -> None:
        super().__init__(work, env, setup, "", "")
        self.dir, self.mbox = work / "git-am", mbox

    def start(self) -> Timing:
        return self.t(["git", "am", "-q", "-3", str(self.mbox)], self.dir)

    def in_progress(self) -> bool:
        state = git("rev-parse", "--git-path", "rebase-apply", cwd=self.dir, env=self.env)
        return (self.dir / state).is_dir()

    def resume(self, files: list[str]) -> list[Timing]:
        add = self.t(["git", "add", "--", *files], self.dir)
        return [add, self.t(["git", "am", "-q", "--continue"], self.dir)]

    def skip(self) -> Timing:
        return self.t(["git", "am", "-q", "--skip"], self.dir)


class Forkpatch(Tool):
    def __init__(
        self, work: Path, env: dict[str, str], setup: Callable[[Path], None], onto: str, name: str
    ) -> None:
        super().__init__(work, env)
        self.name = name
        self.dir, self.setup, self.onto = work / name.replace(" ", "-"), setup, onto
        self.fp = forkpatch_argv()

    def prepare(self) -> None:
        self.setup(self.dir)

    def start(self) -> Timing:
        return self.t([*self.fp, "-q", "rebase", "--onto", self.onto], self.dir)

    def stopped(self, t: Timing) -> bool:
        return t.rc == STOPPED

    def tree_dir(self) -> Path:
        return self.dir / ".forkpatch" / "rebase-worktree"

    def resume(self, files: list[str]) -> list[Timing]:
        return [self.t([*self.fp, "-q", "rebase", "--continue"], self.dir)]

    def skip(self) -> Timing:
        return self.t([*self.fp, "-q", "rebase", "--skip"], self.dir)

    def result_tree(self) -> str:
        """The rebased series applied (the editing work tree: moved by a warm rebase,
        made here, untimed, for a cold one)."""
        wt = self.dir / ".forkpatch" / "worktree"
        if not (wt / ".git").exists():
            run([*self.fp, "-q", "apply"], cwd=self.dir, env=self.env)
        return git("rev-parse", "HEAD^{tree}", cwd=wt, env=self.env)


# --------------------------------------------------------------------------- scenarios


def clone_at(fork: Path, rev: str, env: dict[str, str]) -> Callable[[Path], None]:
    def setup(dest: Path) -> None:
        rmtree(dest)
        run(["git", "clone", "-q", "--shared", "--no-checkout", str(fork), str(dest)], env=env)
        run(["git", "checkout", "-q", "-f", "-B", "work", rev], cwd=dest, env=env)

    return setup


def settle_index(tree: Path, env: dict[str, str]) -> None:
    """The editing work tree as a user's is when a rebase starts, long after the
    checkout that wrote it: a file written in the same second as the index is "racily
    clean" to git, whose next status reads it whole (all 5,800 files of the fork, right
    after an apply). A second later one status (untimed) checks them and writes the
    index back, as the user's own first status after the apply did."""
    time.sleep(1.05)
    run(["git", "status", "--porcelain"], cwd=tree, env=env)


def generated_tools(
    data: Data, onto: str, work: Path, env: dict[str, str], suffix: str = ""
) -> list[Tool]:
    template = data.fork.parent / "project"  # beside the data it was made from
    fp = forkpatch_argv()
    if not (template / "series.yaml").is_file():
        rmtree(template)
        template.mkdir(parents=True)
        run([*fp, "init", "--fork-url", str(data.fork), "--base", BASE], cwd=template, env=env)
        run([*fp, "import", *map(str, sorted(data.patches.glob("*.patch")))], cwd=template, env=env)

    def cold(dest: Path) -> None:
        rmtree(dest)
        shutil.copytree(template, dest, ignore=shutil.ignore_patterns(".forkpatch"))

    def warm(dest: Path) -> None:
        # Applied, and rebased before (stopped and aborted): store, editing work tree
        # and conflict work tree exist.
        cold(dest)
        run([*fp, "-q", "apply"], cwd=dest, env=env)
        run([*fp, "-q", "rebase", "--onto", STOPS_TAG], cwd=dest, env=env, check=False)
        run([*fp, "-q", "rebase", "--abort"], cwd=dest, env=env)
        settle_index(dest / ".forkpatch" / "worktree", env)

    return [
        GitRebase(work, env, clone_at(data.fork, "origin/series", env), onto, BASE),
        Forkpatch(work, env, warm, onto, "forkpatch warm" + suffix),
        Forkpatch(work, env, cold, onto, "forkpatch cold" + suffix),
        GitAm(work, env, clone_at(data.fork, onto, env), data.mbox),
    ]


def real_tools(fork: str, work: Path, env: dict[str, str], suffix: str = "") -> list[Tool]:
    mbox, base, _tree = series_mbox(fork, work)
    onto = git(f"--git-dir={fork}", "rev-parse", f"{REAL_ONTO}^{{commit}}", env=env)
    fp = [*forkpatch_argv(), "--fork-repo", fork]

    def checkout(dest: Path, rev: str) -> None:
        borrowed_checkout(Path(fork), dest, rev)
        mark_placeholders(dest, env)

    def series_checkout(dest: Path) -> None:
        checkout(dest, base)
        run(["git", "am", "-q", str(mbox)], cwd=dest, env=env)

    def cold(dest: Path) -> None:
        own_series_project(dest)

    def warm(dest: Path) -> None:
        own_series_project(dest)
        run([*fp, "-q", "apply"], cwd=dest, env=env)
        settle_index(dest / ".forkpatch" / "worktree", env)

    # git with parallel checkout, as forkpatch's own git runs (checkout.workers=0): the
    # move of the 5,800-file tree is most of both tools' time.
    parallel = GitRebase(
        work, _with_config(env, {"checkout.workers": "0"}), series_checkout, onto, base
    )
    parallel.name, parallel.dir = "git rebase, workers", work / "git-rebase-workers"
    tools: list[Tool] = [
        GitRebase(work, env, series_checkout, onto, base),
        parallel,
        Forkpatch(work, env, warm, REAL_ONTO, "forkpatch warm" + suffix),
        Forkpatch(work, env, cold, REAL_ONTO, "forkpatch cold" + suffix),
        GitAm(work, env, lambda d: checkout(d, onto), mbox),
    ]
    for tool in tools:
        if isinstance(tool, Forkpatch):
            tool.fp = fp
    return tools


def _with_config(env: dict[str, str], config: dict[str, str]) -> dict[str, str]:
    """``env`` with more git configuration given through the environment."""
    env = dict(env)
    n = int(env.get("GIT_CONFIG_COUNT", "0"))
    for i, (key, value) in enumerate(config.items(), start=n):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    env["GIT_CONFIG_COUNT"] = str(n + len(config))
    return env


def with_other_source(
    tools: list[Tool], make: Callable[[dict[str, str], str], list[Tool]], other: Path | None
) -> list[Tool]:
    """``tools``, and after its forkpatch rows the same rows run from the forkpatch source
    tree ``other`` (``--ab``: an older checkout's ``src``), in the same rounds."""
    if other is None:
        return tools
    run([sys.executable, "-m", "compileall", "-q", str(other)], env=bench_env())
    env = bench_env({"PYTHONPATH": str(other.resolve())})
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    extra = [t for t in make(env, f" ({other})") if isinstance(t, Forkpatch)]
    at = max(i for i, t in enumerate(tools) if isinstance(t, Forkpatch)) + 1
    return [*tools[:at], *extra, *tools[at:]]


# --------------------------------------------------------------------------- the bench


def bench(
    scenario: str, tools: list[Tool], resolutions: dict[str, bytes | None], rounds: int
) -> dict[str, object]:
    runs: dict[str, list[Run]] = {t.name: [] for t in tools}
    loads = [load()]
    for r in range(rounds):
        trees = {}
        for tool in tools:
            os.sync()
            got = tool.go(resolutions)
            if got.error:
                raise SystemExit(f"{scenario}, round {r + 1}: {got.error}")
            runs[tool.name].append(got)
            trees[tool.name] = got.tree
            steps = " + ".join(f"{t.seconds:.2f}" for _, t in got.steps)
            say(
                f"    {scenario:<7} {tool.name:<15} round {r + 1}/{rounds}: {got.seconds:6.2f}s ({steps})"
            )
        if len(set(trees.values())) != 1:
            raise SystemExit(f"{scenario}, round {r + 1}: the trees differ: {trees}")
        loads.append(load())
    return {
        "scenario": scenario,
        "load": loads,
        "tools": {n: summary(rs) for n, rs in runs.items()},
    }


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summary(runs: list[Run]) -> dict[str, object]:
    def kind(k: str) -> list[float]:
        return [
            t.seconds
            for r in runs
            for i, (s, t) in enumerate(r.steps)
            if s == k and i < len(r.steps) - 1
        ]

    return {
        "whole": _median([r.seconds for r in runs]),
        "cpu": _median([r.cpu for r in runs]),
        "runs": [round(r.seconds, 3) for r in runs],
        "start": _median([r.steps[0][1].seconds for r in runs if len(r.steps) > 1]),
        "continue": _median(kind("continue")),
        "skip": _median(kind("skip")),
        "finish": _median([r.steps[-1][1].seconds for r in runs]),
        "calls": len(runs[0].steps) if runs else 0,
        "stops": sum(1 for s, _ in runs[0].steps if s != "start") if runs else 0,
    }


def _s(x: object) -> str:
    return "-" if x is None else f"{x:.2f}"


def report(result: dict[str, object]) -> str:
    scenario = str(result["scenario"])
    tools: dict[str, dict[str, object]] = result["tools"]  # type: ignore[assignment]
    git_whole = tools["git rebase"]["whole"]
    rows = []
    for name, s in tools.items():
        ratio = f"{s['whole'] / git_whole:.2f}x" if git_whole else "-"  # type: ignore[operator]
        rows.append(
            [
                name,
                _s(s["whole"]),
                f"{min(s['runs']):.2f}-{max(s['runs']):.2f}",  # type: ignore[arg-type]
                _s(s["cpu"]),
                _s(s["start"]),
                _s(s["continue"]),
                _s(s["skip"]),
                _s(s["finish"]),
                str(s["stops"]),
                ratio,
            ]
        )
    loads = result["load"]
    head = (
        f"## {scenario}: {result.get('what', '')} (medians; load average {loads[0]} -> {loads[-1]})"  # type: ignore[index]
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
                "cpu s",
                "start",
                "--continue",
                "--skip",
                "finish",
                "stops",
                "/ git rebase",
            ],
        ),
    ]
    targets = TARGETS.get(scenario.split("-")[0])
    for name, target in zip(("forkpatch warm", "forkpatch cold"), targets or (), strict=False):
        s = tools.get(name)
        if s is None or not git_whole:
            continue
        lines.append(target_line(name, s, tools["git rebase"], target))
    return "\n".join(lines)


def target_line(name: str, s: dict[str, object], git_s: dict[str, object], target: float) -> str:
    """The verdicts of one forkpatch row (a :func:`summary`) against git rebase's:
    the whole, the first and finishing calls, each ``--continue`` and ``--skip``."""
    ratio = s["whole"] / git_s["whole"]  # type: ignore[operator]
    verdict = "MET" if ratio <= target else "MISSED"
    line = f"target: {name} whole <= {target}x git rebase: {ratio:.2f}x -> {verdict}"
    for end in ("start", "finish"):
        if s[end] is not None and git_s[end]:
            r = s[end] / git_s[end]  # type: ignore[operator]
            ok = "MET" if r <= ENDS_TARGET else "MISSED"
            line += f"; {end} <= {ENDS_TARGET}x git's: {r:.2f}x -> {ok}"
    for step in ("continue", "skip"):
        if s[step] is not None:
            ok = "MET" if s[step] <= CONTINUE_TARGET else "MISSED"  # type: ignore[operator]
            line += f"; each --{step} <= {CONTINUE_TARGET} s: {s[step]:.2f} s -> {ok}"
    return line


class CountedForkpatch(Forkpatch):
    """A forkpatch tool whose calls run with a logging git first on PATH (and, with
    ``profile``, under cProfile): what each call starts, not how long it takes."""

    def __init__(self, tool: Forkpatch, shim: tuple[Path, Path], profile: Path | None) -> None:
        env = dict(tool.env)
        env["PATH"] = f"{shim[0]}{os.pathsep}{env['PATH']}"
        super().__init__(tool.work, env, tool.setup, tool.onto, tool.name)
        self.fp, self.log, self.profile = tool.fp, shim[1], profile
        self.calls: list[dict[str, object]] = []

    def t(self, argv: list[str], cwd: Path) -> Timing:
        self.log.write_text("")
        if self.profile is not None:
            name = f"{self.dir.name}-{len(self.calls) + 1}.prof"
            served = [sys.executable, str(Path(__file__).with_name("profile_served.py"))]
            argv = [*served, str(self.profile / name), *argv[len(forkpatch_argv()) :]]
        got = super().t(argv, cwd)
        subs = _subcommands(self.log)
        self.calls.append(
            {
                "tool": self.name,
                "call": len(self.calls) + 1,
                "what": argv[-1] if argv[-1].startswith("--") else "start",
                "seconds": round(got.seconds, 3),
                "git": sum(subs.values()),
                "subcommands": subs,
            }
        )
        return got

    def stopped(self, t: Timing) -> bool:
        # A stop leaves the journal (whatever the profiled run's exit status).
        journal = self.dir / ".forkpatch" / "rebase" / "state.json"
        return super().stopped(t) or (self.profile is not None and journal.is_file())


def count_git(
    tools: list[Tool], resolutions: dict[str, bytes | None], work: Path, profile: Path | None
) -> list[dict[str, object]]:
    """One more round of the forkpatch tools, untimed, with a logging git on PATH."""
    rmtree(work / "git-shim")
    (work / "git-shim").mkdir(parents=True)
    shim = git_shim(work / "git-shim")
    rows: list[dict[str, object]] = []
    for tool in tools:
        if isinstance(tool, Forkpatch):
            counted = CountedForkpatch(tool, shim, profile)
            got = counted.go(resolutions)
            if got.error:
                raise SystemExit(f"counting git: {got.error}")
            rows += counted.calls
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", default="stops,nostop,real")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--patches", type=int, default=20)
    ap.add_argument("--conflicts", type=int, default=6)
    ap.add_argument("--drift", type=int, default=2)
    ap.add_argument(
        "--count-git", action="store_true", help="one more untimed round with git counted"
    )
    ap.add_argument("--profile", type=Path, help="with --count-git: a cProfile of each call here")
    ap.add_argument(
        "--json", action="store_true", help="the results as JSON on stdout (tables on stderr)"
    )
    ap.add_argument(
        "--think",
        type=float,
        default=None,
        help="seconds between a stop and its resolution, untimed (default 1.05, with --quick "
        "0; 0: none)",
    )
    ap.add_argument("--quick", action="store_true", help="a tiny size and one round (for CI)")
    ap.add_argument(
        "--ab", type=Path, help="also time forkpatch from this source tree (e.g. an older src/)"
    )
    ap.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "small-series")
    a = ap.parse_args(argv)
    if a.quick:
        a.files, a.patches, a.conflicts, a.rounds = 200, 8, 3, 1
        a.scenarios = "stops,nostop" if a.scenarios == ap.get_default("scenarios") else a.scenarios
    scenarios = [s for s in a.scenarios.split(",") if s]
    Tool.think = a.think if a.think is not None else (0.0 if a.quick else Tool.think)
    work: Path = a.workdir
    work.mkdir(parents=True, exist_ok=True)
    env = bench_env(home=work / "home")
    info = machine_info()
    say("machine: " + ", ".join(f"{k}={v}" for k, v in info.items()))
    results: list[dict[str, object]] = []
    counts: list[dict[str, object]] = []
    if a.profile:
        a.profile.mkdir(parents=True, exist_ok=True)
    sizes = Sizes(a.files, a.patches, a.conflicts, a.drift)
    for scenario in scenarios:
        if scenario in ("stops", "nostop"):
            data = make_data(work, sizes)
            onto = STOPS_TAG if scenario == "stops" else NOSTOP_TAG
            tools = generated_tools(data, onto, work / "generated", env)
            tools = with_other_source(
                tools, partial(generated_tools, data, onto, work / "generated"), a.ab
            )
            resolutions = data.resolutions
            what = f"{a.patches} patches, {a.files + 1} files, {a.drift} drift commits" + (
                f" + {a.conflicts} conflicting ({a.conflicts - 1} resolved, 1 skipped)"
                if scenario == "stops"
                else ", no stop"
            )
        elif scenario == "real":
            fork = os.environ.get("FORKPATCH_FORK_REPO") or str(FIXTURE)
            if not Path(fork).is_dir():
                say(f"real: no fork repository at {fork} (FORKPATCH_FORK_REPO): left out")
                continue
            tools = real_tools(fork, work / "real", env)
            tools = with_other_source(tools, partial(real_tools, fork, work / "real"), a.ab)
            resolutions = {}
            what = f"the repository's own series {REAL_BASE} -> {REAL_ONTO} on the fork"
        else:
            raise SystemExit(f"unknown scenario {scenario!r} (stops, nostop, real)")
        say(f"## {scenario}: {what}")
        result = bench(scenario, tools, resolutions, a.rounds)
        result["what"] = what
        results.append(result)
        print(report(result) + "\n", file=sys.stderr if a.json else sys.stdout, flush=True)
        if a.count_git:
            profile = a.profile / scenario if a.profile else None
            if profile is not None:
                profile.mkdir(parents=True, exist_ok=True)
            rows = count_git(tools, resolutions, work / scenario, profile)
            for row in rows:
                row["scenario"] = scenario
                say(
                    f"    {scenario:<7} {row['tool']:<15} call {row['call']:>2} {row['what']:<11} {row['git']:>3} git processes {row['subcommands']}"
                )
            counts.extend(rows)
    doc = {
        "machine": info,
        "rounds": a.rounds,
        "sizes": vars(sizes),
        "results": results,
        "git_counts": counts,
    }
    write_results("small_series.json", doc, to_stdout=a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
