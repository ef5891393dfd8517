"""SIGKILL forkpatch at every write point of a command; nothing is ever half written.

The kill points come from the test hook in ``forkpatch.fsutil``: a first run with
``FORKPATCH_TEST_COUNT_WRITES`` lists the command's write events (each rename or
unlink of a file, temporary files included); then for each n the command runs again
on a fresh copy with ``FORKPATCH_TEST_KILL_AT=n`` and kills itself there. After
each kill:

1. no file in series.yaml, patches/ or dist/ is torn: each is byte-equal to its
   old or its new version;
2. the next command (``forkpatch status``) either finds exactly the old or exactly
   the new set of files (a commit cut short is finished by it), or, for a rebase,
   says how to ``--continue`` or ``--abort``; both then end exactly new / old;
3. from the old state, running the command again gives exactly the new state.

The default run tries every kill point of every command unless a command has more
than ``FORKPATCH_KILL_SAMPLE`` (default 24) points; then an even sample is taken and
the ``slow`` test sweeps them all.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from forkpatch.example import build_release_wheel, make_fork, write_example_patches
from support.cli import fp, fp_in
from support.git import git
from support.projects import Stash, leftovers, temp_files, visible
from support.reliability import Row


@dataclass
class Case:
    name: str
    args: tuple[str, ...]
    setup: Callable[[Path, Path], None]  # (project, base dir) -> None, in-process
    journaled: bool = False  # the rebase journal: continue/abort instead of roll-forward
    rerun: bool = True  # from the old state, running again gives the new state
    changes: bool = True  # False: the command writes only forkpatch's own state (apply)
    points: list[int] = field(default_factory=list)


def _ok(project: Path, *args: str) -> str:
    code, out, err = fp_in(project, *args)
    assert code == 0, f"forkpatch {' '.join(args)} -> {code}\n{out}\n{err}"
    return err


def _nothing(project: Path, base: Path) -> None:
    pass


def _applied(project: Path, base: Path) -> None:
    _ok(project, "apply")


def _editing_middle(project: Path, base: Path) -> None:
    """`edit capability-floor`; the edit shifts eager-block-cast's hunk (so it is rewritten
    too) and the commit subject changes the summary (so series.yaml is rewritten)."""
    _ok(project, "apply")
    _ok(project, "edit", "capability-floor")
    wt = project / ".forkpatch" / "worktree"
    f = wt / "vllm" / "utils" / "deep_gemm.py"
    f.write_text("# hardening: two lines on top\n# of deep_gemm.py\n" + f.read_text())
    msg = git(wt, "log", "-1", "--format=%B")
    git(
        wt,
        "commit",
        "-q",
        "-a",
        "--amend",
        "-m",
        msg.replace("capability-floor: ", "capability-floor: (edited) ", 1),
    )


def _top_edited(project: Path, base: Path) -> None:
    """The top patch (cli-version) edited in the work tree, with a new summary."""
    _ok(project, "apply")
    wt = project / ".forkpatch" / "worktree"
    f = wt / "vllm" / "entrypoints" / "cli" / "main.py"
    f.write_text(f.read_text() + "# hardening: one more line\n")
    msg = git(wt, "log", "-1", "--format=%B")
    git(wt, "commit", "-q", "--amend", "-m", msg.replace(": ", ": (top) ", 1))


def _hand_edited_stack(project: Path, base: Path) -> None:
    """Every applied patch commit gets one more line (by hand, with git): export rewrites
    all four files and, for the new top summary, series.yaml."""
    _ok(project, "apply")
    wt = project / ".forkpatch" / "worktree"
    commits = git(
        wt,
        "rev-list",
        "--reverse",
        "--first-parent",
        "HEAD",
        "--not",
        git(project, "--git-dir", ".forkpatch/repo.git", "rev-parse", "v1.2.1^{commit}"),
    ).split()
    git(wt, "reset", "-q", "--hard", f"{commits[0]}^")
    for n, c in enumerate(commits):
        git(wt, "cherry-pick", "--allow-empty", c)
        (wt / "vllm" / "__init__.py").write_text(
            (wt / "vllm" / "__init__.py").read_text() + f"# hardening {n}\n"
        )
        git(wt, "commit", "-q", "-a", "--amend", "--no-edit")
    msg = git(wt, "log", "-1", "--format=%B")
    git(wt, "commit", "-q", "--amend", "-m", msg.replace(": ", ": (hand) ", 1))


def _half_imported(project: Path, base: Path) -> None:
    """Only the first two example patches; the command imports the other two."""
    names = sorted(p.name for p in (project / "patches").glob("*.patch"))
    assert len(names) == 4
    _ok(project, "delete", "cli-version")
    _ok(project, "delete", "eager-block-cast")


def _with_dist(project: Path, base: Path) -> None:
    """dist/ already holds an older build and its SHA256SUMS."""
    dist = project / "dist"
    dist.mkdir()
    old = dist / "1cat_vllm-1.2.0+fp.old-py3-none-any.whl"
    shutil.copy2(base / "release" / "1cat_vllm-1.2.1-py3-none-any.whl", old)
    import hashlib

    (dist / "SHA256SUMS").write_text(
        f"{hashlib.sha256(old.read_bytes()).hexdigest()}  {old.name}\n"
    )


def _incoming(base: Path) -> list[str]:
    return [str(p) for p in sorted((base / "incoming").glob("*.patch"))[2:]]


CASES: list[Case] = [
    Case("apply", ("apply",), _nothing, changes=False),
    Case("refresh", ("refresh",), _editing_middle),
    Case("refresh-top", ("refresh",), _top_edited),
    Case("export", ("export",), _hand_edited_stack),
    Case("rebase", ("rebase", "--onto", "v1.3.0"), _applied, journaled=True, rerun=False),
    Case(
        "build-wheel-overlay",
        (
            "build-wheel",
            "--mode",
            "overlay",
            "--base-wheel",
            "BASE/release/1cat_vllm-1.2.1-py3-none-any.whl",
        ),
        _with_dist,
    ),
    Case("import", ("import", "INCOMING"), _half_imported),
    Case("rename", ("rename", "eager-block-cast", "eager-cast"), _applied),
    Case("move", ("move", "cli-version", "--before", "odd-width-padding"), _applied),
    Case("delete", ("delete", "cli-version"), _applied),
    Case("delete-middle", ("delete", "odd-width-padding"), _applied),
    Case("new", ("new", "extra-fix", "-m", "An extra fix"), _applied),
]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """fork/, incoming/, release/ and project/ (the example series imported)."""
    root = tmp_path_factory.mktemp("kill")
    make_fork(root / "fork")
    write_example_patches(root / "fork", "v1.2.1", root / "incoming")
    build_release_wheel(root / "fork", "v1.2.1", root / "release")
    project = root / "project"
    project.mkdir()
    _ok(project, "init", "--fork-url", str(root / "fork"), "--base", "v1.2.1")
    _ok(project, "import", *map(str, sorted((root / "incoming").glob("*.patch"))))
    return root


def _args(case: Case, base: Path) -> list[str]:
    out: list[str] = []
    for a in case.args:
        if a == "INCOMING":
            out.extend(_incoming(base))
        else:
            out.append(a.replace("BASE", str(base)))
    return out


def _events(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _sample(n: int, limit: int) -> list[int]:
    if n <= limit:
        return list(range(1, n + 1))
    step = (n - 1) / (limit - 1)
    return sorted({1 + round(i * step) for i in range(limit)})


def _run_matrix(case: Case, base: Path, *, exhaustive: bool) -> None:
    work = base / f"case-{case.name}"
    project = work / "project"
    if not project.exists():
        shutil.copytree(base / "project", project, symlinks=True)
        case.setup(project, base)
    stash = Stash(project)
    args = _args(case, base)
    old = visible(project)

    # The reference run: the new state and the list of write events.
    counter = work / "events.txt"
    counter.unlink(missing_ok=True)
    ref = fp(project, *args, extra_env={"FORKPATCH_TEST_COUNT_WRITES": str(counter)})
    assert ref.returncode == 0, ref.stderr
    new = visible(project)
    assert (new != old) == case.changes, f"{case.name}: the scenario changes {new == old}"
    events = _events(counter)
    assert events, f"{case.name}: no write events"
    limit = int(os.environ.get("FORKPATCH_KILL_SAMPLE", "24"))
    points = list(range(1, len(events) + 1)) if exhaustive else _sample(len(events), limit)

    outcomes: Counter[str] = Counter()
    for n in points:
        stash.restore()
        got = fp(project, *args, extra_env={"FORKPATCH_TEST_KILL_AT": str(n)})
        where = f"{case.name}: kill at event {n}/{len(events)} ({events[n - 1]})"
        assert got.returncode == -9, f"{where}: not killed (exit {got.returncode})\n{got.stderr}"
        now = visible(project)
        # 1. never a torn file
        for rel, data in now.items():
            assert data in (old.get(rel), new.get(rel)), f"{where}: {rel} is torn"
        for rel in set(old) & set(new):
            assert rel in now or old[rel] == new[rel] or rel not in old, (
                f"{where}: {rel} disappeared"
            )
        # 2. the next command finds old or new, or says how to go on
        code, _out, err = fp_in(project, "status")
        journal = project / ".forkpatch" / "rebase" / "state.json"
        if case.journaled and journal.exists():
            assert "forkpatch rebase --continue" in err and "--abort" in err, f"{where}: {err}"
            how = "--continue" if n % 2 else "--abort"
            _ok(project, "rebase", how)
            after = visible(project)
            assert after == (new if how == "--continue" else old), f"{where}: {how} differs"
            outcomes["continued" if how == "--continue" else "aborted"] += 1
        else:
            assert code in (0, 3), f"{where}: status failed ({code})\n{err}"
            after = visible(project)
            assert after in (old, new), f"{where}: mixed state after recovery: " + ", ".join(
                sorted(
                    r
                    for r in set(after) | set(old) | set(new)
                    if after.get(r) not in (old.get(r), new.get(r))
                    or (
                        old.get(r) != new.get(r)
                        and r in after
                        and after[r] != new.get(r)
                        and after[r] != old.get(r)
                    )
                )
            )
            if not case.changes:
                outcomes["unchanged, command re-run"] += 1
                _ok(project, *args)
            elif after == new:
                outcomes["rolled forward" if now != new else "new"] += 1
            else:
                outcomes["old"] += 1
                if case.rerun:
                    _ok(project, *args)
                    assert visible(project) == new, f"{where}: a second run differs"
        assert not leftovers(project), f"{where}: left {leftovers(project)}"
        # No writer's temporary file anywhere (state files, the work tree): the next
        # command removed them.
        assert temp_files(project) == [], f"{where}: left {temp_files(project)}"
        assert not (project / ".forkpatch" / "commit.json").exists(), where
    # The kill points fall on both sides of the commit point: some leave the old files,
    # some the new (or a journal to finish), so both recoveries were exercised.
    if case.journaled:
        assert outcomes["continued"] + outcomes["aborted"] > 0 and outcomes["old"] > 0, outcomes
    elif case.changes:
        assert outcomes["old"] > 0 and outcomes["new"] + outcomes["rolled forward"] > 0, outcomes


@pytest.mark.slow  # each case runs its command once per sampled write point
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_kill_points(base: Path, case: Case) -> None:
    _run_matrix(case, base, exhaustive=os.environ.get("FORKPATCH_KILL_EXHAUSTIVE") == "1")


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_kill_points_exhaustive(base: Path, case: Case) -> None:
    if os.environ.get("FORKPATCH_KILL_EXHAUSTIVE") != "1":
        pytest.skip(
            "set FORKPATCH_KILL_EXHAUSTIVE=1 for the full sweep (the default run "
            "samples commands with many write points)"
        )
    _run_matrix(case, base, exhaustive=True)


def test_event_hook_is_off_by_default() -> None:
    from forkpatch import fsutil

    assert fsutil.write_hooks() == (0, "")  # the suite's own process never counts or kills


def test_git_is_available() -> None:
    assert subprocess.run(["git", "--version"], capture_output=True, check=False).returncode == 0


RELIABILITY = [
    Row(
        "interruptions",
        f"SIGKILL at each write event of {len(CASES)} commands: "
        + ", ".join(c.name for c in CASES),
        "every write event (up to FORKPATCH_KILL_SAMPLE=24 per command, evenly sampled; "
        "FORKPATCH_KILL_EXHAUSTIVE=1 for all)",
        "no torn file; the next command finds exactly the old or the new files (a commit cut "
        "short is rolled forward) or, for a rebase, --continue / --abort end new / old; "
        "from old, running again gives new; no temporary file left",
    ),
]
