"""A conflict-heavy rebase, resolved by a script: forkpatch vs git rebase vs git am -3.

The target: on a tree the size of the fork, a rebase that stops at 20
conflicts costs at most what ``git rebase`` costs for the same stops, and a rebase
without conflicts stays at or below 1/5 of ``git rebase`` (bench_rebase.py).

The dataset is gen_tree.py's (generated first when missing). On top of its
``v1.1.0`` this script makes the tag ``v1.1.0-c<K>``: K upstream commits, each
changing a line that one of K plain patches of ``series-N`` also changes (patches
spread evenly through the series), so every tool stops at the same K patches.
Each stop is resolved by the same script (:func:`resolve`: each conflict region
becomes "upstream's lines, then the patch's lines", whatever the marker style),
outside the timed region. Timed, for each tool, is everything it runs:

* forkpatch   ``forkpatch rebase --onto TAG``, then per stop ``forkpatch rebase
              --continue`` (the files with markers in ``.forkpatch/rebase-worktree``
              are found untimed, like git's unmerged paths). The project has rebased
              before (its store and conflict work tree exist, as git's clone and its
              checkout do); a second row times a fresh project, which makes both;
* git rebase  ``git rebase --onto TAG v1.0.0 work``, then per stop
              ``git add <files>`` + ``git rebase --continue`` (merge backend);
* git am -3   ``git am -3 mbox``, then per stop ``git add <files>`` +
              ``git am --continue`` (``git am --skip`` for a patch already upstream).

Correctness: forkpatch's rewritten series, re-applied to the tag, must give the
tree git rebase ends with, and so must git am -3's.

    python bench/bench_conflicts.py [--workdir DIR] [-n 300] [--conflicts 20] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    DEFAULT_WORKDIR,
    Measure,
    Timing,
    bench_env,
    data_dir,
    forkpatch_argv,
    fresh_clone,
    fresh_project,
    git,
    machine_info,
    print_machine,
    repeat,
    rmtree,
    run,
    table,
    timed,
)

BASE = "v1.0.0"
DRIFT = "v1.1.0"

# --------------------------------------------------------------------------- resolution

_BLOCK = re.compile(
    rb"^<{7}(?: [^\n]*)?\n(.*?)(?:^\|{7}(?: [^\n]*)?\n.*?)?^={7}\n(.*?)^>{7}(?: [^\n]*)?\n",
    re.S | re.M,
)


def resolve(data: bytes) -> bytes:
    """Each conflict region -> upstream's side, then the patch's side (no base)."""
    return _BLOCK.sub(lambda m: m.group(1) + m.group(2), data)


def resolve_files(root: Path, paths: list[str]) -> None:
    for rel in paths:
        p = root / rel
        data = p.read_bytes()
        fixed = resolve(data)
        if fixed == data:
            raise RuntimeError(f"{p}: no conflict region to resolve")
        p.write_bytes(fixed)


# --------------------------------------------------------------------------- the tag


def _patches(data: Path, n: int) -> list[Path]:
    return sorted((data / "format-patch").glob("*.patch"))[:n]


def _first_removed_line(patch: bytes) -> tuple[str, bytes] | None:
    """(file, line) of the first removed line of a modified (not new/deleted) file."""
    current = None
    for line in patch.split(b"\n"):
        if line.startswith(b"diff --git "):
            current = None
        elif line.startswith(b"--- a/"):
            current = line[6:].decode()
        elif line.startswith(b"--- /dev/null"):
            current = None
        elif current and line.startswith(b"-") and not line.startswith(b"---"):
            text = line[1:]
            if text.strip() and len(text.strip()) > 8:
                return current, text
    return None


def make_conflict_tag(workdir: Path, n: int, k: int) -> tuple[str, list[str]]:
    """The tag ``v1.1.0-c<k>`` (made once; cached in the dataset) and its patch names."""
    data = data_dir(workdir)
    upstream = data / "upstream.git"
    tag = f"{DRIFT}-c{k}-n{n}"
    note = data / f"{tag}.json"
    if note.exists() and git(f"--git-dir={upstream}", "tag", "--list", tag):
        return tag, json.loads(note.read_text())["patches"]
    manifest = json.loads((data / "manifest.json").read_text())
    special = {name.split("-")[0] for names in manifest["kinds"].values() for name in names}
    patches = _patches(data, n)
    chosen: list[tuple[str, str, bytes]] = []
    step = n / k
    start = 0
    gd = f"--git-dir={upstream}"
    for i in range(k):
        # The first suitable patch at or after position i*step.
        for j in range(max(start, int(i * step)), n):
            p = patches[j]
            if p.stem.split("-")[1] in special:  # NNNN-pNNNN-...: not a plain patch
                continue
            got = _first_removed_line(p.read_bytes())
            if got is None:
                continue
            path, line = got
            proc = run(["git", gd, "cat-file", "blob", f"{DRIFT}:{path}"], check=False)
            if proc.returncode != 0 or proc.stdout.count(line + b"\n") != 1:
                continue
            if any(c[1] == path for c in chosen):
                continue
            chosen.append((p.name, path, line))
            start = j + 1
            break
    if len(chosen) < k:
        raise SystemExit(f"found only {len(chosen)} patches to make conflicts for (need {k})")
    with tempfile.TemporaryDirectory() as tmp:
        env = bench_env({"GIT_INDEX_FILE": str(Path(tmp) / "index")})
        head = git(gd, "rev-parse", f"{DRIFT}^{{commit}}")
        run(["git", gd, "read-tree", head], env=env)
        for idx, (_pname, path, line) in enumerate(chosen, 1):
            blob = run(["git", gd, "cat-file", "blob", f"{head}:{path}"]).stdout
            new = blob.replace(
                line + b"\n", line.rstrip() + f"  # upstream fix {idx}".encode() + b"\n"
            )
            oid = (
                run(["git", gd, "hash-object", "-w", "--stdin"], input=new).stdout.decode().strip()
            )
            mode = git(gd, "ls-tree", head, "--", path).split()[0]
            run(["git", gd, "update-index", "--cacheinfo", f"{mode},{oid},{path}"], env=env)
            tree = run(["git", gd, "write-tree"], env=env).stdout.decode().strip()
            head = (
                run(
                    [
                        "git",
                        gd,
                        "commit-tree",
                        tree,
                        "-p",
                        head,
                        "-m",
                        f"Upstream fix {idx} in {path}",
                    ],
                    env=env,
                )
                .stdout.decode()
                .strip()
            )
        run(["git", gd, "tag", "-f", tag, head])
    names = [c[0] for c in chosen]
    note.write_text(json.dumps({"tag": tag, "patches": names}, indent=1) + "\n")
    return tag, names


# --------------------------------------------------------------------------- the tools


class Total:
    """Adds up the timed commands of one tool's run."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.cpu = 0.0
        self.stops = 0
        self.steps: list[float] = []

    def add(self, t: Timing) -> Timing:
        self.seconds += t.seconds
        self.cpu += t.cpu
        self.steps.append(t.seconds)
        return t

    def timing(self, rc: int, note: str = "") -> Timing:
        per = ", ".join(f"{s:.2f}" for s in self.steps[:3])
        return Timing(
            self.seconds, rc, cpu=self.cpu, note=f"{self.stops} stops; {note}first calls {per}s"
        )


def _unmerged(clone: Path, env: dict[str, str]) -> list[str]:
    out = run(["git", "diff", "--name-only", "--diff-filter=U", "-z"], cwd=clone, env=env).stdout
    return [p.decode() for p in out.split(b"\0") if p]


def git_rebase(clone: Path, tag: str, env: dict[str, str], limit: int) -> Timing:
    total = Total()
    t = total.add(timed(["git", "rebase", "-q", "--onto", tag, BASE, "work"], cwd=clone, env=env))
    while t.rc != 0 and total.stops < limit:
        files = _unmerged(clone, env)
        if not files:
            return total.timing(t.rc, f"stopped without conflicts: {t.stderr[-300:]!r}; ")
        total.stops += 1
        resolve_files(clone, files)
        total.add(timed(["git", "add", "--", *files], cwd=clone, env=env))
        t = total.add(timed(["git", "rebase", "--continue"], cwd=clone, env=env))
    return total.timing(t.rc)


def git_am3(clone: Path, mbox: Path, env: dict[str, str], limit: int) -> Timing:
    total = Total()
    t = total.add(timed(["git", "am", "-3", "-q", str(mbox)], cwd=clone, env=env))
    skips = 0
    while t.rc != 0 and total.stops + skips < limit:
        files = _unmerged(clone, env)
        msg = (t.stdout + t.stderr).decode(errors="replace")
        if not files:
            if "No changes" in msg or "already applied" in msg:
                skips += 1
                t = total.add(timed(["git", "am", "-q", "--skip"], cwd=clone, env=env))
                continue
            return total.timing(t.rc, f"stopped: {msg[-300:]}; ")
        total.stops += 1
        resolve_files(clone, files)
        total.add(timed(["git", "add", "--", *files], cwd=clone, env=env))
        t = total.add(timed(["git", "am", "-q", "--continue"], cwd=clone, env=env))
    return total.timing(t.rc, f"{skips} --skip; " if skips else "")


def _marked(wt: Path, env: dict[str, str]) -> list[str]:
    """Files of the conflict work tree that hold conflict markers (what a person greps for)."""
    changed = run(["git", "diff", "--name-only", "-z", "HEAD"], cwd=wt, env=env).stdout
    new = run(["git", "ls-files", "--others", "--exclude-standard", "-z"], cwd=wt, env=env).stdout
    out = []
    for raw in (changed + new).split(b"\0"):
        if raw and b"\n<<<<<<< " in b"\n" + (wt / raw.decode()).read_bytes():
            out.append(raw.decode())
    return out


def forkpatch_rebase(project: Path, tag: str, env: dict[str, str], limit: int) -> Timing:
    fp = forkpatch_argv()
    total = Total()
    t = total.add(timed([*fp, "-q", "rebase", "--onto", tag], cwd=project, env=env))
    wt = project / ".forkpatch" / "rebase-worktree"
    while t.rc == 3 and total.stops < limit:
        files = _marked(wt, env)
        if not files:
            return total.timing(t.rc, f"stopped without markers: {t.stderr[-300:]!r}; ")
        total.stops += 1
        resolve_files(wt, files)
        t = total.add(timed([*fp, "-q", "rebase", "--continue"], cwd=project, env=env))
    if t.rc != 0:
        return total.timing(t.rc, f"exit {t.rc}: {t.stderr[-300:]!r}; ")
    return total.timing(0)


def used_project(workdir: Path, n: int, dest: Path, tag: str, env: dict[str, str]) -> Path:
    """A project that has rebased before: its store has the tag and its conflict work
    tree exists (made by an earlier rebase that stopped and was aborted). The same
    footing as git's clone, whose checkout is not timed either."""
    fresh_project(workdir, n, dest)
    fp = forkpatch_argv()
    run([*fp, "-q", "rebase", "--onto", tag], cwd=dest, env=env, check=False)
    run([*fp, "-q", "rebase", "--abort"], cwd=dest, env=env)
    return dest


# --------------------------------------------------------------------------- the run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    ap.add_argument("-n", type=int, default=300, help="patches in the series")
    ap.add_argument("--conflicts", type=int, default=20)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--skip", default="", help="comma list: fp,rebase,am")
    a = ap.parse_args(argv)
    workdir: Path = a.workdir
    if not (data_dir(workdir) / "manifest.json").exists() or a.n not in json.loads(
        (data_dir(workdir) / "manifest.json").read_text()
    ).get("sizes", []):
        sizes = sorted({100, 300, a.n})
        print(f"generating the dataset (gen_tree.py --sizes {','.join(map(str, sizes))}) ...")
        run(
            [
                sys.executable,
                str(Path(__file__).with_name("gen_tree.py")),
                "--workdir",
                str(workdir),
                "--sizes",
                ",".join(map(str, sizes)),
            ],
            capture=False,
        )
    info = machine_info()
    print_machine(info)
    tag, names = make_conflict_tag(workdir, a.n, a.conflicts)
    print(f"tag {tag}: {a.conflicts} upstream commits conflicting with {', '.join(names[:4])}, ...")
    env = bench_env()
    skip = set(filter(None, a.skip.split(",")))
    data = data_dir(workdir)
    runs = workdir / "run"
    runs.mkdir(parents=True, exist_ok=True)
    limit = a.conflicts * 3
    results: list[Measure] = []
    trees: dict[str, str] = {}

    clone = runs / "c-git-rebase"
    if "rebase" not in skip:

        def verify_rebase(_c: object, t: Timing, _i: int) -> tuple[bool, str]:
            trees["git"] = git("-C", str(clone), "rev-parse", "HEAD^{tree}")
            return t.rc == 0, t.note

        results.append(
            repeat(
                "git rebase",
                "git rebase --onto TAG v1.0.0 work; per stop: git add + git rebase --continue",
                a.reps,
                prepare=lambda i: fresh_clone(workdir, clone, f"series-{a.n}"),
                measure=lambda c: git_rebase(clone, tag, env, limit),
                verify=verify_rebase,
            )
        )

    proj = runs / "c-fp"
    if "fp" not in skip:

        def verify_fp(_c: object, t: Timing, i: int) -> tuple[bool, str]:
            if t.rc != 0:
                return False, t.note
            if i == 0 and "git" in trees:
                probe = timed(
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
                got = json.loads(probe.stdout or b"{}").get("tree")
                if got != trees["git"]:
                    return False, t.note + "; the rewritten series does not give git rebase's tree"
            return True, t.note

        results.append(
            repeat(
                "forkpatch rebase",
                "forkpatch rebase --onto TAG; per stop: forkpatch rebase --continue",
                a.reps,
                prepare=lambda i: used_project(workdir, a.n, proj, tag, env),
                measure=lambda c: forkpatch_rebase(proj, tag, env, limit),
                verify=verify_fp,
            )
        )
        results.append(
            repeat(
                "forkpatch rebase, first ever",
                "the same in a fresh project: the store and the conflict work tree are made",
                a.reps,
                prepare=lambda i: fresh_project(workdir, a.n, proj),
                measure=lambda c: forkpatch_rebase(proj, tag, env, limit),
                verify=lambda c, t, i: (t.rc == 0, t.note),
            )
        )

    am_clone = runs / "c-git-am3"
    if "am" not in skip:

        def verify_am(_c: object, t: Timing, _i: int) -> tuple[bool, str]:
            tree = git("-C", str(am_clone), "rev-parse", "HEAD^{tree}")
            same = "git" not in trees or tree == trees["git"]
            return t.rc == 0 and same, t.note + ("" if same else "; tree differs from git rebase's")

        results.append(
            repeat(
                "git am -3",
                "git am -3 mbox; per stop: git add + git am --continue",
                a.reps,
                prepare=lambda i: fresh_clone(workdir, am_clone, tag),
                measure=lambda c: git_am3(am_clone, data / f"mbox-{a.n}.mbox", env, limit),
                verify=verify_am,
            )
        )
    for d in (clone, proj, am_clone):
        rmtree(d)

    by = {m.tool: m for m in results}
    ours = by.get("forkpatch rebase")
    rows = []
    for m in results:
        ratio = f"{m.median / ours.median:.2f}x" if ours and m is not ours else "-"
        cpu_ratio = f"{m.cpu / ours.cpu:.2f}x" if ours and m is not ours else "-"
        rows.append(
            [
                m.tool,
                f"{m.median:.2f}",
                m.spread(),
                f"{m.cpu:.2f}",
                ratio,
                cpu_ratio,
                "ok" if m.ok else "FAILED",
                m.note,
            ]
        )
    print(
        f"\n## rebase {a.n} patches {BASE} -> {tag}: {a.conflicts} conflict stops (median of {a.reps})"
    )
    print(
        table(
            rows,
            [
                "tool",
                "wall s",
                "range",
                "cpu s",
                "tool / forkpatch (wall)",
                "(cpu)",
                "check",
                "note",
            ],
        )
    )
    if ours and "git rebase" in by:
        r = by["git rebase"].median / ours.median
        rc = by["git rebase"].cpu / ours.cpu
        print(
            f"target: forkpatch <= git rebase for the same stops: git rebase / forkpatch = "
            f"{r:.2f}x wall, {rc:.2f}x cpu (need >= 1x) -> {'MET' if r >= 1 else 'MISSED'}"
        )
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "conflicts.json").write_text(
        json.dumps(
            {
                "machine": info,
                "tag": tag,
                "patches": names,
                "results": [m.to_json() for m in results],
            },
            indent=2,
        )
        + "\n"
    )
    return 0 if all(m.ok for m in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
