"""What git's own tools make of a series: ``git rebase`` and ``git am -3``, commit by
commit, beside forkpatch's verdicts on the same commits.

Each tool runs on every commit of ``base..head`` (merges left out, as ``git rebase``
does; commits that change nothing left out, as ``forkpatch import`` refuses them) in
the same order, and a commit it stops on is skipped (``git rebase --skip``, ``git am
--skip``, ``forkpatch rebase --skip``), so that each verdict is the commit's own on
the tree of the commits below it that applied. A verdict is ``applied`` (a new
commit), ``dropped`` (already there: a cherry-pick git leaves out, a commit that
became empty, ``upstreamed``) or ``conflict``. The trees at the end are compared too.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from forkpatch.engine import SeriesApplier
from forkpatch.kinds import APPLIED_STATUSES, DROPPED_STATUSES
from forkpatch.project import Project
from support.git import git, git_env

#: forkpatch's statuses as the verdicts git's tools give.
VERDICT_OF = {
    **{s: "applied" for s in APPLIED_STATUSES},
    **{s: "dropped" for s in DROPPED_STATUSES},
    "conflict": "conflict",
}


@dataclass(frozen=True)
class Run:
    """One tool's verdicts, commit by commit (in :func:`series_commits`' order), and the
    tree it ended on with the stopped commits skipped."""

    verdicts: tuple[str, ...]
    tree: str


def series_commits(repo: Path, base: str, head: str) -> list[str]:
    """The commits of ``base..head`` that ``git rebase`` picks, oldest first, without
    those that change no file."""
    listed = git(repo, "rev-list", "--reverse", "--topo-order", "--no-merges", f"{base}..{head}")
    changing = []
    for c in listed.split():
        if git(repo, "diff-tree", "--no-commit-id", "--name-only", "-r", c):
            changing.append(c)
    return changing


def _clone(repo: Path, dest: Path, commit: str) -> Path:
    """A clone of ``repo`` sharing its objects, checked out at ``commit``; the source's
    sparse-checkout patterns (a repaired fork snapshot keeps its placeholder blobs
    out of the work tree with them) come along."""
    git(dest.parent, "clone", "-q", "--shared", "--no-checkout", str(repo), str(dest))
    patterns = Path(git(repo, "rev-parse", "--absolute-git-dir")) / "info" / "sparse-checkout"
    if patterns.is_file():
        git(dest, "config", "core.sparseCheckout", "true")
        git(dest, "config", "core.sparseCheckoutCone", "false")
        shutil.copy(patterns, dest / ".git" / "info" / "sparse-checkout")
    git(dest, "checkout", "-q", "--detach", commit)
    return dest


_TODO_EDITOR = """\
import sys
log, path = sys.argv[1], sys.argv[2]
out = []
for line in open(path, encoding="utf-8"):
    out.append(line)
    if line.startswith("pick "):
        out.append(f"exec echo {line.split()[1]} $(git rev-parse HEAD) >> {log}\\n")
open(path, "w", encoding="utf-8").write("".join(out))
"""


def git_rebase(repo: Path, base: str, head: str, onto: str, work: Path) -> Run:
    """``git rebase`` of ``base..head`` onto ``onto`` (``git rebase ONTO`` when ``base``
    is an ancestor of it, as a user runs it on a branch: cherry-picks already in
    ``onto`` left out; else ``--onto ONTO BASE``), each stop skipped. The todo list is
    git's own, with an ``exec`` after each pick that logs where HEAD went."""
    work.mkdir(parents=True, exist_ok=True)
    commits = series_commits(repo, base, head)
    clone = _clone(repo, work / "rebase", git(repo, "rev-parse", head))
    onto_c = git(repo, "rev-parse", f"{onto}^{{commit}}")
    editor, log = work / "todo.py", work / "picks.log"
    editor.write_text(_TODO_EDITOR, encoding="utf-8")
    # git runs the editor through the shell with the todo file's path appended.
    env = git_env(GIT_SEQUENCE_EDITOR=f"'{sys.executable}' '{editor}' '{log}'", GIT_EDITOR="true")
    forward = (
        subprocess.run(["git", "merge-base", "--is-ancestor", base, onto_c], cwd=clone).returncode
        == 0
    )
    how = [onto_c] if forward else ["--onto", onto_c, base]
    verdict: dict[str, str] = {}
    proc = _git_run(clone, env, "rebase", "-i", "--empty=drop", *how)
    while proc.returncode:
        stopped = git(clone, "rev-parse", "-q", "--verify", "REBASE_HEAD", check=False)
        if not stopped:
            raise AssertionError(f"git rebase failed: {proc.stderr.decode()}")
        verdict[stopped] = "conflict"
        proc = _git_run(clone, env, "rebase", "--skip")
    prev = onto_c
    for line in log.read_text(encoding="utf-8").splitlines() if log.exists() else []:
        short, now = line.split()
        full = git(clone, "rev-parse", short)
        if full not in verdict:
            verdict[full] = "applied" if now != prev else "dropped"
        prev = now
    # A commit missing from git's todo list is a cherry-pick it found in ``onto``.
    return Run(
        tuple(verdict.get(c, "dropped") for c in commits), git(clone, "rev-parse", "HEAD^{tree}")
    )


def git_am(repo: Path, base: str, head: str, onto: str, work: Path) -> Run:
    """``git am -3`` of each commit's ``git format-patch`` mail on ``onto``, in order; a
    mail it stops on is skipped."""
    work.mkdir(parents=True, exist_ok=True)
    commits = series_commits(repo, base, head)
    clone = _clone(repo, work / "am", git(repo, "rev-parse", f"{onto}^{{commit}}"))
    env = git_env(GIT_EDITOR="true")
    out = []
    for c in commits:
        mail = subprocess.run(
            ["git", "-C", str(repo), "format-patch", "-1", "--stdout", c],
            env=env,
            capture_output=True,
            check=True,
        ).stdout
        before = git(clone, "rev-parse", "HEAD")
        proc = subprocess.run(
            ["git", "am", "-3", "-q"], cwd=clone, input=mail, env=env, capture_output=True
        )
        if proc.returncode:
            out.append("conflict")
            _git_run(clone, env, "am", "--skip")
            git(clone, "reset", "-q", "--hard", before)
            continue
        out.append("applied" if git(clone, "rev-parse", "HEAD") != before else "dropped")
    return Run(tuple(out), git(clone, "rev-parse", "HEAD^{tree}"))


def _git_run(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True)


def mails(repo: Path, base: str, head: str, out: Path) -> list[Path]:
    """Each commit of :func:`series_commits` as a ``git format-patch`` file, numbered in
    that order (what ``forkpatch import`` takes)."""
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for i, c in enumerate(series_commits(repo, base, head), 1):
        mail = subprocess.run(
            ["git", "-C", str(repo), "format-patch", "-1", "--stdout", "--zero-commit", c],
            env=git_env(),
            capture_output=True,
            check=True,
        ).stdout
        path = out / f"{i:04d}.patch"
        path.write_bytes(mail)
        files.append(path)
    return files


def forkpatch_verdicts(check_json: str) -> tuple[str, ...]:
    """The verdicts of ``forkpatch check --json`` (past a conflict: the forecast on the
    tree without it, which is what skipping it gives)."""
    return tuple(VERDICT_OF[p["status"]] for p in json.loads(check_json)["patches"])


def series_tree(project: Path) -> str:
    """The tree of the project's series applied exactly to its base (after a rebase:
    what it made), through forkpatch's own applier."""
    p = Project(root=project)
    store = p.fork().store
    result = SeriesApplier(store, p.series.base.commit).run(p.items(), write=True)
    failed = [r.to_json() for r in result.results if r.status in ("conflict", "blocked")]
    assert not failed, f"the rebased series does not apply exactly to its base: {failed}"
    return store.run("rev-parse", f"{result.head}^{{tree}}").stdout.decode().strip()


@dataclass(frozen=True)
class Compared:
    """The three tools on one series and one target."""

    rebase: Run
    am: Run
    forkpatch: Run
    check: dict[str, object]  # forkpatch check --json

    def differing(self) -> list[tuple[int, str, str, str]]:
        """(index, rebase's, am's, forkpatch's verdict) where forkpatch differs from
        ``git rebase``."""
        trio = zip(self.rebase.verdicts, self.am.verdicts, self.forkpatch.verdicts, strict=True)
        return [(i, r, a, f) for i, (r, a, f) in enumerate(trio) if f != r]


def compare(repo: Path, base: str, head: str, onto: str, work: Path) -> Compared:
    """git rebase, git am -3 and forkpatch (``init`` on ``base``, which must be a tag of
    ``repo``; ``import`` of the mails; ``check --onto``; ``rebase --onto`` with a
    ``--skip`` at each stop) on the commits of ``base..head``."""
    from support.cli import fp_in

    rebase = git_rebase(repo, base, head, onto, work / "git")
    am = git_am(repo, base, head, onto, work / "git")
    project = work / "project"
    project.mkdir(parents=True)
    fp_in(project, "init", "--fork-url", str(repo), "--base", base)
    code, out, err = fp_in(project, "import", *map(str, mails(repo, base, head, work / "mails")))
    assert code == 0, err
    code, out, err = fp_in(project, "check", "--onto", onto, "--json")
    assert code in (0, 3), err
    check = json.loads(out)
    code, out, err = fp_in(project, "rebase", "--onto", onto)
    while code == 3:
        code, out, err = fp_in(project, "rebase", "--skip")
    assert code == 0, err
    mine = Run(tuple(VERDICT_OF[p["status"]] for p in check["patches"]), series_tree(project))
    return Compared(rebase, am, mine, check)


def scratch_view(fork: Path, dest: Path, refs: dict[str, str]) -> Path:
    """A bare repository that borrows ``fork``'s objects (alternates) and has only
    ``refs`` (name -> commit): tags for a series' base can be made there without
    writing to the fork. The fork's sparse-checkout patterns come along."""
    git(dest.parent, "init", "-q", "--bare", str(dest))
    src = Path(git(fork, "rev-parse", "--absolute-git-dir"))
    (dest / "objects" / "info" / "alternates").write_text(f"{src / 'objects'}\n", encoding="utf-8")
    lines = "".join(f"update {name} {commit}\n" for name, commit in refs.items())
    subprocess.run(
        ["git", "-C", str(dest), "update-ref", "--stdin"],
        input=lines.encode(),
        env=git_env(),
        check=True,
    )
    patterns = src / "info" / "sparse-checkout"
    if patterns.is_file():
        (dest / "info").mkdir(exist_ok=True)
        shutil.copy(patterns, dest / "info" / "sparse-checkout")
    return dest
