"""Shared helpers for the forkpatch benchmarks: isolated env, timing, reporting.

Every external command runs with an isolated git configuration (no global or
system config, fixed identity, ``gc.auto=0`` so that a background auto-gc never
lands inside one tool's figure) and a private HOME, so results do not depend on
the user's ~/.gitconfig or ~/.quiltrc.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
DEFAULT_WORKDIR = Path(os.environ.get("FORKPATCH_BENCH_DIR", "/tmp/forkpatch-bench"))

BENCH_DATE = "1700000000 +0000"


def bench_env(extra: Mapping[str, str] | None = None, home: Path | None = None) -> dict[str, str]:
    """Environment for every timed and untimed command."""
    env = dict(os.environ)
    for key in (
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "FORKPATCH_FORK_REPO",
        "QUILT_PATCHES",
        "QUILT_PC",
        "QUILT_PATCH_OPTS",
        "QUILT_PUSH_ARGS",
        "QUILTRC",
    ):
        env.pop(key, None)
    home = home or (DEFAULT_WORKDIR / "home")
    home.mkdir(parents=True, exist_ok=True)
    env.update(
        {
            "HOME": str(home),
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_CONFIG_SYSTEM": "/dev/null",
            "GIT_CONFIG_NOSYSTEM": "1",
            # gc.auto=0: no auto-gc in the middle of `git am` / `git rebase` (forkpatch's
            # own store sets the same); advice off: no extra output to write.
            "GIT_CONFIG_COUNT": "3",
            "GIT_CONFIG_KEY_0": "gc.auto",
            "GIT_CONFIG_VALUE_0": "0",
            "GIT_CONFIG_KEY_1": "advice.detachedHead",
            "GIT_CONFIG_VALUE_1": "false",
            "GIT_CONFIG_KEY_2": "init.defaultBranch",
            "GIT_CONFIG_VALUE_2": "main",
            "GIT_AUTHOR_NAME": "Bench",
            "GIT_AUTHOR_EMAIL": "bench@example.invalid",
            "GIT_COMMITTER_NAME": "Bench",
            "GIT_COMMITTER_EMAIL": "bench@example.invalid",
            "GIT_AUTHOR_DATE": BENCH_DATE,
            "GIT_COMMITTER_DATE": BENCH_DATE,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_EDITOR": "true",
            "EDITOR": "true",
            "LC_ALL": "C",
            "TZ": "UTC",
            "QUILT_PATCHES": "patches",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    if extra:
        env.update(extra)
    return env


def run(
    argv: Sequence[str],
    cwd: Path | None = None,
    *,
    check: bool = True,
    input: bytes | None = None,
    env: Mapping[str, str] | None = None,
    capture: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    proc = subprocess.run(
        list(argv),
        cwd=cwd,
        input=input,
        env=dict(env or bench_env()),
        stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
        stderr=subprocess.PIPE if capture else subprocess.DEVNULL,
        check=False,
    )
    if check and proc.returncode != 0:
        raise RuntimeError(
            f"command failed ({proc.returncode}): {shlex.join(argv)} in {cwd}\n"
            f"{(proc.stderr or b'').decode(errors='replace')[-3000:]}"
            f"{(proc.stdout or b'').decode(errors='replace')[-2000:]}"
        )
    return proc


def git(*args: str, cwd: Path | None = None, **kw: object) -> str:
    return run(["git", *args], cwd=cwd, **kw).stdout.decode().strip()  # type: ignore[arg-type]


@dataclass
class Timing:
    seconds: float
    rc: int
    # user+sys of the command and every process it waited for; a forkpatch call the
    # command server ran counts the client alone (the worker is the server's child)
    cpu: float = 0.0
    note: str = ""
    stdout: bytes = b""
    stderr: bytes = b""


def timed(
    argv: Sequence[str],
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Timing:
    """Run one command, timing only the subprocess (time.perf_counter)."""
    e = dict(env or bench_env())
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(list(argv), cwd=cwd, env=e, capture_output=True, check=False)
    dt = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return Timing(dt, proc.returncode, cpu=cpu, stdout=proc.stdout, stderr=proc.stderr)


@dataclass
class Measure:
    """Repeated measurements of one tool on one scenario."""

    tool: str
    command: str
    runs: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)
    ok: bool = True
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.runs) if self.runs else float("nan")

    @property
    def cpu(self) -> float:
        return statistics.median(self.cpus) if self.cpus else float("nan")

    def spread(self) -> str:
        if len(self.runs) < 2:
            return "-"
        return f"{min(self.runs):.2f}-{max(self.runs):.2f}"

    def to_json(self) -> dict[str, object]:
        return {
            "tool": self.tool,
            "command": self.command,
            "runs": self.runs,
            "cpus": self.cpus,
            "median": self.median,
            "cpu_median": self.cpu,
            "ok": self.ok,
            "note": self.note,
        }


def repeat(
    tool: str,
    command: str,
    reps: int,
    prepare: Callable[[int], object],
    measure: Callable[[object], Timing],
    verify: Callable[[object, Timing, int], tuple[bool, str]] | None = None,
    cleanup: Callable[[object], None] | None = None,
) -> Measure:
    """``prepare`` (untimed) -> ``measure`` (timed) -> ``verify``/``cleanup`` (untimed).

    ``verify`` returns (ok, note); by default a run is ok when it exits 0.
    """
    m = Measure(tool, command)
    for i in range(reps):
        ctx = prepare(i)
        # Flush what prepare wrote (tree copies, clones): otherwise the first fsync of
        # the timed command pays for the previous runs' dirty pages, and times creep up.
        os.sync()
        t = measure(ctx)
        m.runs.append(t.seconds)
        m.cpus.append(t.cpu)
        if verify is not None:
            ok, note = verify(ctx, t, i)
        else:
            ok, note = (
                t.rc == 0,
                ("" if t.rc == 0 else f"exit {t.rc}: {t.stderr.decode(errors='replace')[-300:]}"),
            )
        m.ok = m.ok and ok
        if note:
            m.note = note
        if cleanup:
            cleanup(ctx)
        print(
            f"    {tool:<30} run {i + 1}/{reps}: {t.seconds:7.2f}s wall {t.cpu:7.2f}s cpu"
            + ("" if ok else "  FAILED")
            + (f"  [{note}]" if note else ""),
            flush=True,
        )
    return m


def rmtree(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)


def machine_info() -> dict[str, str]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass

    def version(argv: list[str]) -> str:
        try:
            return (
                subprocess.run(
                    argv,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    env=bench_env(),
                    check=False,
                )
                .stdout.decode()
                .splitlines()[0]
                .strip()
            )
        except (OSError, IndexError):
            return "absent"

    return {
        "nproc": str(os.cpu_count()),
        "cpu": cpu,
        "memory": mem,
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "git": version(["git", "--version"]),
        "quilt": version(["quilt", "--version"]),
        "patch": version(["patch", "--version"]),
        "forkpatch": version([sys.executable, "-m", "forkpatch", "--version"]),
    }


def print_machine(info: dict[str, str]) -> None:
    print("machine: " + ", ".join(f"{k}={v}" for k, v in info.items()))


def table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=False)]
    out = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    for r in rows:
        out.append(
            "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) + " |"
        )
    return "\n".join(out)


_COMPILED: set[str] = set()


def write_results(name: str, doc: object, *, to_stdout: bool = False) -> Path:
    """``doc`` as JSON in ``bench/out/NAME`` (git ignores it), and on stdout too with
    ``to_stdout`` (a bench's ``--json``)."""
    out = REPO_ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    path = out / name
    path.write_text(json.dumps(doc, indent=1) + "\n")
    if to_stdout:
        print(json.dumps(doc, indent=1))
    return path


def precompile_forkpatch() -> None:
    """Write the bytecode of the forkpatch that the benches run (untimed, once).

    An installed package has its ``.pyc`` files; a checkout run with
    ``PYTHONDONTWRITEBYTECODE=1`` (set on some machines, and by :func:`bench_env`)
    would otherwise compile every module from source on every call, 0.1-0.2 s that
    is not forkpatch's.
    """
    env = bench_env()
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    where = (
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import forkpatch, os; print(os.path.dirname(forkpatch.__file__))",
            ],
            capture_output=True,
            env=env,
            check=False,
        )
        .stdout.decode()
        .strip()
    )
    if where and where not in _COMPILED:
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", where],
            env=env,
            check=False,
            capture_output=True,
        )
        _COMPILED.add(where)


def forkpatch_argv() -> list[str]:
    """The installed console script (what users run), else ``python -m forkpatch``.

    The script next to this interpreter is preferred to the first one on PATH: a
    pyenv shim in front of it costs ~0.2 s of bash per call, which is not forkpatch's.
    Its bytecode is written first (:func:`precompile_forkpatch`).
    """
    precompile_forkpatch()
    exe = Path(sys.executable).parent / "forkpatch"
    if exe.is_file():
        return [str(exe)]
    found = shutil.which("forkpatch")
    return [found] if found else [sys.executable, "-m", "forkpatch"]


def forkpatch_has(command: str) -> bool:
    proc = subprocess.run(
        [*forkpatch_argv(), command, "--help"], capture_output=True, env=bench_env(), check=False
    )
    return proc.returncode == 0


# --------------------------------------------------------------------------- scenarios


def data_dir(workdir: Path) -> Path:
    return workdir / "data"


def load_manifest(workdir: Path) -> dict[str, object]:
    import json

    path = data_dir(workdir) / "manifest.json"
    if not path.exists():
        raise SystemExit(f"{path} is missing: run `python bench/gen_tree.py --workdir {workdir}`")
    return json.loads(path.read_text())


def fresh_project(workdir: Path, n: int, dest: Path) -> Path:
    """A copy of the forkpatch project (series.yaml + patches/), without any store:
    the timed command creates ``.forkpatch/`` itself, as on a fresh checkout."""
    rmtree(dest)
    shutil.copytree(
        data_dir(workdir) / f"project-{n}", dest, ignore=shutil.ignore_patterns(".forkpatch")
    )
    return dest


def fresh_clone(workdir: Path, dest: Path, rev: str, branch: str = "work") -> Path:
    """A clone sharing the upstream's objects, with ``rev`` checked out on ``branch``."""
    rmtree(dest)
    upstream = data_dir(workdir) / "upstream.git"
    commit = git(f"--git-dir={upstream}", "rev-parse", f"{rev}^{{commit}}")
    run(["git", "clone", "-q", "--shared", "--no-checkout", str(upstream), str(dest)])
    run(["git", "checkout", "-q", "-b", branch, commit], cwd=dest)
    return dest


def fresh_quilt(workdir: Path, n: int, dest: Path, rev: str) -> Path:
    """A plain copy of the tree at ``rev`` with the quilt series in patches/."""
    rmtree(dest)
    dest.mkdir(parents=True)
    upstream = data_dir(workdir) / "upstream.git"
    archive = run(["git", f"--git-dir={upstream}", "archive", "--format=tar", rev]).stdout
    run(["tar", "-x", "-f", "-"], cwd=dest, input=archive)
    shutil.copytree(data_dir(workdir) / f"quilt-{n}" / "patches", dest / "patches")
    return dest


def upstream_tree(workdir: Path, rev: str) -> str:
    return git(f"--git-dir={data_dir(workdir) / 'upstream.git'}", "rev-parse", f"{rev}^{{tree}}")


def dir_matches_tree(
    workdir: Path, directory: Path, rev: str, exclude: tuple[str, ...] = (".pc", "patches")
) -> bool:
    """True when the plain directory's files equal the tree of ``rev`` (untimed check)."""
    import tempfile

    upstream = data_dir(workdir) / "upstream.git"
    with tempfile.TemporaryDirectory() as tmp:
        env = bench_env({"GIT_INDEX_FILE": str(Path(tmp) / "index")})
        base = ["git", f"--git-dir={upstream}", f"--work-tree={directory}"]
        run([*base, "read-tree", rev], env=env)
        proc = run(
            [*base, "diff", "--quiet", "--", ".", *[f":!{x}" for x in exclude]],
            env=env,
            check=False,
            cwd=directory,
        )
        untracked = run(
            [
                *base,
                "ls-files",
                "--others",
                "--exclude-standard",
                "--",
                ".",
                *[f":!{x}" for x in exclude],
            ],
            env=env,
            cwd=directory,
        ).stdout
        return proc.returncode == 0 and not untracked.strip()


def cmdline(argv: Sequence[str]) -> str:
    return shlex.join(str(a) for a in argv)


def profile_forkpatch(args: Sequence[str], cwd: Path, out: Path, top: int = 30) -> None:
    """Run ``python -m forkpatch ARGS`` under cProfile; print the top forkpatch functions
    by cumulative time, then the top functions overall by own time."""
    import pstats

    t = timed([sys.executable, "-m", "cProfile", "-o", str(out), "-m", "forkpatch", *args], cwd=cwd)
    print(
        f"profile of `forkpatch {' '.join(args)}`: {t.seconds:.2f}s wall under cProfile "
        f"(exit {t.rc}); stats in {out}"
    )
    stats = pstats.Stats(str(out))
    stats.sort_stats("cumulative").print_stats(r"forkpatch/(?!cli)", top)
    stats.sort_stats("tottime").print_stats(15)
