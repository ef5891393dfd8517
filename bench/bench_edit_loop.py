"""The edit loop on the real fork: change the middle patch of an N-patch series, then
have the whole series re-applied and its patch files written.

The work a developer does many times a day. Every tool works on the same series
(N patches made with git on the fork's v1.2.1 tree, each adding one line to one of
five large files of the fork, so that the patches above the middle one touch the
file it touches) and makes the same change in each round: one more line in the
middle patch. Per round and tool, timed (the edit itself is not):

* forkpatch   ``forkpatch edit M`` ... ``forkpatch refresh`` (refresh writes the patch
              file and re-applies the patches above);
* git         ``git rebase -i`` (M marked ``edit``) ... ``git commit -a --amend``,
              ``git rebase --continue``, ``git format-patch`` (the patch files);
* quilt       ``quilt pop M`` ... ``quilt refresh``, ``quilt push -a``;
* stg         ``stg goto M`` ... ``stg refresh``, ``stg goto TOP``, ``stg export``.

The rounds are interleaved (one round of each tool in turn), so a change of the
machine's load falls on every tool alike; after each round the five files must be
byte-identical across the tools and the middle patch file of each must hold the new
line. Medians, ratios, and the targets (N=20: <= 0.8x git, <= 0.5x quilt and stg;
N=100: <= 0.25x git, <= 0.15x quilt and stg) are printed.

The fork is FORKPATCH_FORK_REPO or ../shared/fixtures/1cat-vllm.git, only read: its
v1.2.1 tree (``git archive``) becomes a scratch repository under the workdir, which
every tool uses (forkpatch as its fork).

    python bench/bench_edit_loop.py [--sizes 20,100] [--rounds 3] [--workdir DIR]
        [--ab OLD/src] [--tools git,quilt,stg]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_real_apply import fork_source
from common import (
    DEFAULT_WORKDIR,
    REPO_ROOT,
    Timing,
    bench_env,
    forkpatch_argv,
    git,
    machine_info,
    print_machine,
    rmtree,
    run,
    table,
    timed,
)

BASE = "v1.2.1"
FILES = 5  # the series spreads over this many files of the fork
SPACING = 30  # lines between two patches' lines in one file: no shared context
TARGETS = {
    20: {"git": 0.8, "quilt": 0.5, "stg": 0.5},
    100: {"git": 0.25, "quilt": 0.15, "stg": 0.15},
}
TOOLS = ("forkpatch", "git", "quilt", "stg")
SKIP: set[str] = set()  # tools left out (--tools)


def marker(i: int) -> str:
    return f"# bench patch {i:03d}"


def subject(i: int) -> str:
    return f"bench patch {i:03d}"


# --------------------------------------------------------------------------- data


def make_fork(source: str, work: Path) -> Path:
    """The fork's v1.2.1 tree as a scratch repository tagged v1.2.1 (cached)."""
    repo = work / "fork"
    if (repo / ".git" / "refs" / "tags" / BASE).is_file():
        return repo
    rmtree(repo)
    repo.mkdir(parents=True)
    archive = run(["git", f"--git-dir={source}", "archive", "--format=tar", BASE]).stdout
    run(["tar", "-x", "-f", "-"], cwd=repo, input=archive)
    git("init", "-q", "-b", "main", cwd=repo)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", f"the fork at {BASE}", cwd=repo)
    git("tag", BASE, cwd=repo)
    return repo


def pick_files(repo: Path, n: int) -> list[str]:
    """The five largest Python files under vllm/ that have room for the series' lines."""
    need = SPACING * (n // FILES + 2)
    sizes = []
    for line in git("ls-files", "vllm", cwd=repo).splitlines():
        if line.endswith(".py"):
            count = (repo / line).read_bytes().count(b"\n")
            if count >= need:
                sizes.append((count, line))
    files = [name for _, name in sorted(sizes, reverse=True)[:FILES]]
    if len(files) < FILES:
        raise SystemExit(f"the fork has fewer than {FILES} files of {need}+ lines")
    return sorted(files)


def insert_after(path: Path, anchor_line: int | str, text: str) -> None:
    """Insert ``text`` as a line after line ``anchor_line`` (1-based) or after the line
    equal to ``anchor_line``."""
    lines = path.read_bytes().split(b"\n")
    if isinstance(anchor_line, int):
        at = anchor_line
    else:
        at = lines.index(anchor_line.encode()) + 1
    lines.insert(at, text.encode())
    path.write_bytes(b"\n".join(lines))


def make_series(repo: Path, n: int, files: list[str]) -> Path:
    """Branch ``series-N`` (N commits on v1.2.1) and its ``git format-patch`` files."""
    out = repo.parent / f"patches-{n}"
    if (out / "series").is_file():
        return out
    git("checkout", "-q", "-f", "-B", f"series-{n}", BASE, cwd=repo)
    for i in range(n):
        rel = files[i % FILES]
        insert_after(repo / rel, SPACING * (i // FILES) + SPACING // 2, marker(i))
        git("commit", "-q", "-a", "-m", subject(i), cwd=repo)
    rmtree(out)
    git("format-patch", "-q", "-o", str(out), BASE, cwd=repo)
    names = sorted(p.name for p in out.glob("*.patch"))
    (out / "series").write_text("".join(f"{name}\n" for name in names))
    git("checkout", "-q", "-f", "main", cwd=repo)
    return out


# --------------------------------------------------------------------------- the tools


class Tool:
    """One tool's copy of the series and its edit loop."""

    name = ""

    def __init__(self, work: Path, repo: Path, patches: Path, n: int) -> None:
        self.work, self.repo, self.patches, self.n = work, repo, patches, n
        self.middle = n // 2
        self.dir = work / self.name
        self.env = bench_env(home=work / "home")

    def tree(self) -> Path:
        return self.dir

    def patch_text(self) -> bytes:
        """The middle patch's file as the tool last wrote it."""
        raise NotImplementedError

    def round(self, edit: Callable[[Path], None]) -> list[Timing]:
        raise NotImplementedError

    def t(self, *argv: str, cwd: Path | None = None) -> Timing:
        timing = timed(list(argv), cwd=cwd or self.dir, env=self.env)
        if timing.rc != 0:
            raise RuntimeError(
                f"{self.name}: {' '.join(argv)} exited {timing.rc}:\n"
                + (timing.stderr + timing.stdout).decode(errors="replace")[-2000:]
            )
        return timing


class Forkpatch(Tool):
    name = "forkpatch"

    def fp(self) -> list[str]:
        return forkpatch_argv()

    def setup(self) -> None:
        rmtree(self.dir)
        self.dir.mkdir(parents=True)
        fp = self.fp()
        run([*fp, "init", "--fork-url", str(self.repo), "--base", BASE], cwd=self.dir, env=self.env)
        names = (self.patches / "series").read_text().split()
        run([*fp, "import", *(str(self.patches / x) for x in names)], cwd=self.dir, env=self.env)
        run([*fp, "apply"], cwd=self.dir, env=self.env)
        import yaml

        series = yaml.safe_load((self.dir / "series.yaml").read_text())
        entry = series["patches"][self.middle]
        self.patch_name, self.patch_file = entry["name"], self.dir / "patches" / entry["file"]

    def tree(self) -> Path:
        return self.dir / ".forkpatch" / "worktree"

    def patch_text(self) -> bytes:
        return self.patch_file.read_bytes()

    def round(self, edit: Callable[[Path], None]) -> list[Timing]:
        fp = self.fp()
        first = self.t(*fp, "edit", self.patch_name)
        edit(self.tree())
        return [first, self.t(*fp, "refresh")]


class OtherForkpatch(Forkpatch):
    """Another forkpatch source tree (``--ab OLD/src``), in the same rounds."""

    name = "forkpatch-ab"
    src: Path | None = None

    def __init__(self, work: Path, repo: Path, patches: Path, n: int) -> None:
        super().__init__(work, repo, patches, n)
        assert self.src is not None
        self.env["PYTHONPATH"] = str(self.src)

    def fp(self) -> list[str]:
        return [sys.executable, "-m", "forkpatch"]


class GitRebase(Tool):
    name = "git"

    def setup(self) -> None:
        rmtree(self.dir)
        run(["git", "clone", "-q", "--shared", str(self.repo), str(self.dir)], env=self.env)
        git("checkout", "-q", "-B", "work", f"origin/series-{self.n}", cwd=self.dir)
        self.out = self.work / "git-patches"

    def patch_text(self) -> bytes:
        return next(self.out.glob(f"{self.middle + 1:04d}-*.patch")).read_bytes()

    def round(self, edit: Callable[[Path], None]) -> list[Timing]:
        mark = f"sed -i '/ {subject(self.middle)}$/s/^pick/edit/'"
        start = self.t("git", "-c", f"sequence.editor={mark}", "rebase", "-q", "-i", BASE)
        edit(self.dir)
        amend = self.t("git", "commit", "-q", "-a", "--amend", "--no-edit")
        cont = self.t("git", "rebase", "--continue")
        rmtree(self.out)
        export = self.t("git", "format-patch", "-q", "-o", str(self.out), BASE)
        return [start, amend, cont, export]


class Quilt(Tool):
    name = "quilt"

    def setup(self) -> None:
        rmtree(self.dir)
        self.dir.mkdir(parents=True)
        archive = run(["git", "-C", str(self.repo), "archive", "--format=tar", BASE]).stdout
        run(["tar", "-x", "-f", "-"], cwd=self.dir, input=archive)
        shutil.copytree(self.patches, self.dir / "patches")
        run(["quilt", "--quiltrc", "/dev/null", "push", "-a", "-q"], cwd=self.dir, env=self.env)
        self.names = (self.patches / "series").read_text().split()

    def patch_text(self) -> bytes:
        return (self.dir / "patches" / self.names[self.middle]).read_bytes()

    def round(self, edit: Callable[[Path], None]) -> list[Timing]:
        q = ("quilt", "--quiltrc", "/dev/null")
        pop = self.t(*q, "pop", "-q", self.names[self.middle])
        edit(self.dir)
        return [pop, self.t(*q, "refresh"), self.t(*q, "push", "-a", "-q")]


class StackedGit(Tool):
    name = "stg"

    def setup(self) -> None:
        rmtree(self.dir)
        run(["git", "clone", "-q", "--shared", str(self.repo), str(self.dir)], env=self.env)
        git("checkout", "-q", "-B", "stgwork", f"origin/series-{self.n}", cwd=self.dir)
        run(["stg", "init"], cwd=self.dir, env=self.env)
        run(["stg", "uncommit", "-n", str(self.n)], cwd=self.dir, env=self.env)
        self.names = run(["stg", "series", "--noprefix"], cwd=self.dir, env=self.env).stdout
        self.names = self.names.decode().split()
        self.out = self.work / "stg-patches"

    def patch_text(self) -> bytes:
        return (self.out / self.names[self.middle]).read_bytes()

    def round(self, edit: Callable[[Path], None]) -> list[Timing]:
        goto = self.t("stg", "goto", self.names[self.middle])
        edit(self.dir)
        refresh = self.t("stg", "refresh")
        back = self.t("stg", "goto", self.names[-1])
        rmtree(self.out)
        return [goto, refresh, back, self.t("stg", "export", "-d", str(self.out))]


# --------------------------------------------------------------------------- the bench


def bench(source: str, n: int, rounds: int, work: Path) -> dict[str, object]:
    work.mkdir(parents=True, exist_ok=True)
    repo = make_fork(source, work.parent)
    files = pick_files(repo, n)
    patches = make_series(repo, n, files)
    middle_file = files[(n // 2) % FILES]
    print(f"## edit loop, N={n}: middle patch {n // 2 + 1} edits {middle_file}", flush=True)
    tools: list[Tool] = []
    classes: list[type[Tool]] = [Forkpatch, GitRebase, Quilt, StackedGit]
    if OtherForkpatch.src is not None:
        classes.insert(1, OtherForkpatch)
    for cls in classes:
        if cls.name in SKIP:
            continue
        if cls.name in ("quilt", "stg") and not shutil.which(cls.name):
            print(f"    {cls.name}: not installed, left out", flush=True)
            continue
        tool = cls(work, repo, patches, n)
        tool.setup()  # type: ignore[attr-defined]
        tools.append(tool)
    seconds: dict[str, list[float]] = {t.name: [] for t in tools}
    for r in range(rounds):
        line = f"# bench edit round {r}"

        def edit(tree: Path, line: str = line) -> None:
            insert_after(tree / middle_file, marker(n // 2), line)

        for tool in tools:
            timings = tool.round(edit)
            seconds[tool.name].append(sum(x.seconds for x in timings))
            print(
                f"    {tool.name:<10} round {r + 1}/{rounds}: {seconds[tool.name][-1]:6.2f}s "
                f"({' + '.join(f'{x.seconds:.2f}' for x in timings)})",
                flush=True,
            )
        digests = {
            t.name: hashlib.sha256(b"".join((t.tree() / f).read_bytes() for f in files)).hexdigest()
            for t in tools
        }
        if len(set(digests.values())) != 1:
            raise SystemExit(f"round {r + 1}: the tools' trees differ: {digests}")
        for t in tools:
            if line.encode() not in t.patch_text():
                raise SystemExit(f"round {r + 1}: {t.name}'s patch file lacks the edit")
    medians = {name: statistics.median(v) for name, v in seconds.items()}
    ours = medians["forkpatch"]
    rows = []
    for name in ("forkpatch", "forkpatch-ab", *TOOLS[1:]):
        if name not in medians:
            continue
        ratio = ours / medians[name]
        target = TARGETS.get(n, {}).get(name)
        verdict = "" if target is None else ("MET" if ratio <= target else "MISSED")
        rows.append(
            [
                name,
                f"{medians[name]:.2f}",
                f"{min(seconds[name]):.2f}-{max(seconds[name]):.2f}",
                f"{ratio:.2f}x" if name != "forkpatch" else "1.00x",
                f"<= {target}x {verdict}" if target is not None else "-",
            ]
        )
    print(table(rows, ["tool", "median s", "range", "forkpatch / tool", "target"]), flush=True)
    return {"n": n, "rounds": rounds, "seconds": seconds, "medians": medians}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="20,100")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "edit-loop")
    ap.add_argument("--ab", type=Path, help="another forkpatch source tree (its src/), same rounds")
    ap.add_argument(
        "--tools", default="", help="only these tools besides forkpatch (git,quilt,stg)"
    )
    args = ap.parse_args(argv)
    OtherForkpatch.src = args.ab
    if args.tools:
        SKIP.update(set(TOOLS[1:]) - set(args.tools.split(",")))
    source = fork_source()
    if source is None:
        return 2
    info = machine_info()
    print_machine(info)
    print(f"load average: {os.getloadavg()[0]:.2f}", flush=True)
    results = [
        bench(source, int(n), args.rounds, args.workdir / f"n{n}") for n in args.sizes.split(",")
    ]
    out = REPO_ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / "edit_loop.json").write_text(json.dumps({"machine": info, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
