"""Export and re-apply start a fixed number of git processes, whatever the series' length.

Issue 12 item 15: both used to start git three times per patch (rev-parse, diff-tree,
show). A ``git`` put first on PATH logs every call; the counts for a short and a long
series must be equal, and the batched diffs must still be each patch's own diff.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from forkpatch.fsutil import file_sha256
from support.git import GIT_ENV, GitCalls, ScratchRepo


def _series(tmp_path: Path, n: int) -> Path:
    fork = ScratchRepo(tmp_path / "fork")
    for f in range(n):
        fork.add_file(f"pkg/f{f:03d}.py", "".join(f"v{k} = {k}\n" for k in range(7)))
    fork.commit("fork")
    fork.tag("v1")
    project = tmp_path / "project"
    project.mkdir()
    _fp(project, "init", "--fork-url", str(fork.path), "--base", "v1")
    series = (project / "series.yaml").read_text().replace("patches: []\n", "patches:\n")
    for i in range(n):
        path = f"pkg/f{i:03d}.py"
        body = "".join(f" v{k} = {k}\n" for k in range(3)) + f"-v3 = 3\n+v3 = {100 + i}\n"
        body += "".join(f" v{k} = {k}\n" for k in range(4, 7))
        (project / "patches" / f"p{i:03d}.patch").write_text(
            f"Patch {i}.\n\ndiff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n"
            f"@@ -1,7 +1,7 @@\n{body}"
        )
        series += f"  - name: p{i:03d}\n    file: p{i:03d}.patch\n    summary: patch {i}\n"
    (project / "series.yaml").write_text(series)
    _fp(project, "apply")
    return project


def _fp(project: Path, *args: str, path: str | None = None) -> None:
    env = {**os.environ, **GIT_ENV}
    env.pop("FORKPATCH_FORK_REPO", None)
    if path:
        env["PATH"] = path
    got = subprocess.run(
        [sys.executable, "-m", "forkpatch", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert got.returncode == 0, got.stderr


def _git_calls(tmp_path: Path, project: Path, *args: str) -> int:
    shim_dir = tmp_path / "shim"
    log = tmp_path / "calls.log"
    if not shim_dir.exists():
        shim_dir.mkdir()
        real = subprocess.run(["which", "git"], capture_output=True, text=True).stdout.strip()
        shim = shim_dir / "git"
        shim.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec "{real}" "$@"\n')
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    log.write_text("")
    _fp(project, *args, path=f"{shim_dir}{os.pathsep}{os.environ['PATH']}")
    # A few commits are written in process, more by one fast-import: not counted.
    return len([c for c in log.read_text().splitlines() if "fast-import" not in c.split()])


@pytest.mark.parametrize("command", [("export",), ("apply",)], ids=["export", "re-apply"])
def test_git_processes_do_not_grow_with_the_series(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    counts = []
    for n in (4, 40):
        project = _series(tmp_path / f"n{n}", n)
        before = {p.name: file_sha256(p) for p in (project / "patches").iterdir()}
        counts.append(_git_calls(tmp_path / f"n{n}", project, *command))
        after = {p.name: file_sha256(p) for p in (project / "patches").iterdir()}
        assert after == before  # a no-op
    assert counts[0] == counts[1] and counts[1] <= 20, counts


def test_the_batched_diffs_are_each_patchs_own(tmp_path: Path) -> None:
    """Hand-made commits on three patches (one with an extra commit on top): export
    rewrites exactly those three files, each with its own change."""
    project = _series(tmp_path, 12)
    wt = project / ".forkpatch" / "worktree"
    env = {**os.environ, **GIT_ENV}

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(wt), *args], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()

    commits = git("log", "--reverse", "--format=%H", "v1..HEAD").split()
    targets = {2: "pkg/f002.py", 7: "pkg/f007.py", 11: "pkg/f011.py"}
    git("reset", "-q", "--hard", f"{commits[2]}^")
    for i, c in enumerate(commits[2:], start=2):
        git("cherry-pick", c)
        if i in targets:
            f = wt / targets[i]
            f.write_text(f.read_text() + f"# by hand {i}\n")
            if i == 7:  # a second, hand-made commit that belongs to p007
                git("commit", "-q", "-a", "-m", "by hand, on top of p007")
            else:
                git("commit", "-q", "-a", "--amend", "--no-edit")
    before = {p.name: p.read_text() for p in (project / "patches").iterdir()}
    _fp(project, "export")
    after = {p.name: p.read_text() for p in (project / "patches").iterdir()}
    changed = sorted(n for n in after if after[n] != before[n])
    assert changed == ["p002.patch", "p007.patch", "p011.patch"], changed
    for i in targets:
        text = after[f"p{i:03d}.patch"]
        assert f"+# by hand {i}" in text and f"+v3 = {100 + i}" in text
        assert all(f"by hand {j}" not in text for j in targets if j != i)


def _mail_series(tmp_path: Path, n: int) -> Path:
    """n patches as `git format-patch` mails (index lines, a diffstat, a signature), on a
    fork whose next tag moves every patched line down: a rebase must refresh all of
    them in their own form."""
    fork = ScratchRepo(tmp_path / "fork")
    for f in range(n):
        fork.add_file(f"pkg/f{f:03d}.py", "".join(f"v{k} = {k}\n" for k in range(7)))
    fork.commit("fork")
    fork.tag("v1")
    for f in range(n):
        fork.add_file(
            f"pkg/f{f:03d}.py", "# new header\n" + "".join(f"v{k} = {k}\n" for k in range(7))
        )
    fork.commit("headers")
    fork.tag("v2")
    fork.git("checkout", "-q", "-b", "series", "v1")
    for f in range(n):
        path = fork.path / f"pkg/f{f:03d}.py"
        path.write_text(path.read_text().replace("v3 = 3", f"v3 = {100 + f}"))
        fork.commit(f"p{f:03d}: change v3 of f{f:03d}")
    out = tmp_path / "mails"
    fork.git("format-patch", "-q", "-o", str(out), "v1..series")
    project = tmp_path / "project"
    project.mkdir()
    _fp(project, "init", "--fork-url", str(fork.path), "--base", "v1")
    _fp(project, "import", *sorted(str(p) for p in out.iterdir()))
    return project


def test_a_rebase_refreshing_mail_form_files_starts_a_fixed_number_of_gits(
    tmp_path: Path,
) -> None:
    """Every patch moves (offset) and is re-rendered in its own form (index lines,
    diffstat): the raw changes and diffstats come from one batched git each."""
    counts = []
    for n in (4, 40):
        project = _mail_series(tmp_path / f"n{n}", n)
        counts.append(_git_calls(tmp_path / f"n{n}", project, "rebase", "--onto", "v2"))
        texts = [p.read_text() for p in sorted((project / "patches").iterdir())]
        assert len(texts) == n
        assert all(
            "@@ -2,7 +2,7 @@" in t and "\nindex " in t and "1 file changed" in t for t in texts
        )
    assert counts[0] == counts[1], counts


def _status(calls: GitCalls, project: Path) -> tuple[dict[str, str], str]:
    """``status --json``'s verdicts by patch, and every git command it started."""
    env = {**os.environ, **GIT_ENV, "PATH": calls.path}
    env.pop("FORKPATCH_FORK_REPO", None)
    got = subprocess.run(
        [sys.executable, "-m", "forkpatch", "status", "--json"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert got.returncode in (0, 3), got.stderr  # 3: a patch conflicts
    import json

    verdicts = {p["name"]: p["status"] for p in json.loads(got.stdout)["patches"]}
    return verdicts, "\n".join(calls.take())


def test_a_status_with_nothing_changed_is_read_back_and_any_change_recomputes_it(
    tmp_path: Path,
) -> None:
    """status applies the series in memory; asked again about the same base and the same
    patch files it reads its answer back (no listing of the fork's tree, no reading of
    its files: with a file of the fork gone from its objects, the answer is still the
    kept one). A patch file changed, the base changed, or the kept answer damaged: the
    answer is computed again (and kept anew), and is right."""
    project = _series(tmp_path, 6)
    shim = GitCalls(tmp_path)
    cache = project / ".forkpatch" / "status-cache.json"
    first, _calls = _status(shim, project)
    assert set(first.values()) == {"clean"} and cache.is_file()
    # One blob of the fork's base tree hidden: a status that read the fork would fail.
    fork = tmp_path / "fork"
    oid = subprocess.run(
        ["git", "-C", str(fork), "rev-parse", "v1:pkg/f000.py"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **GIT_ENV},
    ).stdout.strip()
    loose = fork / ".git" / "objects" / oid[:2] / oid[2:]
    hidden = loose.with_name(loose.name + ".hidden")
    loose.rename(hidden)
    try:
        again, _calls = _status(shim, project)
    finally:
        hidden.rename(loose)
    assert again == first
    # A patch file changed outside forkpatch (now it conflicts): computed again.
    kept = cache.read_bytes()
    p2 = project / "patches" / "p002.patch"
    p2.write_text(p2.read_text().replace("-v3 = 3\n", "-v3 = 333\n"))
    changed, _calls = _status(shim, project)
    assert changed["p002"] == "conflict" and cache.read_bytes() != kept
    # Damaged, or sealed but for another answer: never trusted, computed and kept again.
    kept = cache.read_bytes()
    for damage in (b"{not json", kept.replace(b'"conflict"', b'"clean"')):
        cache.write_bytes(damage)
        got, _calls = _status(shim, project)
        assert got == changed and cache.read_bytes() == kept


def _half_upstreamed(tmp_path: Path, *, stat_files: int, moved: bool = False) -> Path:
    """Three patches as `git format-patch` mails, each changing v3 and v5 of its own file,
    on a fork whose next tag makes the v5 change itself: after a rebase each patch
    changes one line, not two (``moved``: the next tag changes a line between them
    instead, so each patch changes the same lines as before, in a new context). The first ``stat_files`` mails keep
    their diffstat; the others have it cut."""
    fork = ScratchRepo(tmp_path / "fork")
    for f in range(3):
        fork.add_file(f"pkg/f{f}.py", "".join(f"v{k} = {k}\n" for k in range(9)))
    fork.commit("fork")
    fork.tag("v1")
    for f in range(3):
        path = fork.path / f"pkg/f{f}.py"
        if moved:
            path.write_text(path.read_text().replace("v8 = 8", f"v8 = {800 + f}"))
        else:
            path.write_text(path.read_text().replace("v5 = 5", f"v5 = {500 + f}"))
    fork.commit("upstream takes the v5 changes")
    fork.tag("v2")
    fork.git("checkout", "-q", "-b", "series", "v1")
    for f in range(3):
        path = fork.path / f"pkg/f{f}.py"
        text = path.read_text().replace("v3 = 3", f"v3 = {300 + f}")
        path.write_text(text.replace("v5 = 5", f"v5 = {500 + f}"))
        fork.commit(f"p{f}: change v3 and v5 of f{f}")
    out = tmp_path / "mails"
    fork.git("format-patch", "-q", "-o", str(out), "v1..series")
    mails = sorted(out.iterdir())
    for mail in mails[stat_files:]:
        text = mail.read_text()
        head, _, rest = text.partition("\n---\n")
        mail.write_text(head + "\n---\n" + rest[rest.index("\ndiff --git") + 1 :])
    project = tmp_path / "project"
    project.mkdir()
    _fp(project, "init", "--fork-url", str(fork.path), "--base", "v1")
    _fp(project, "import", *map(str, mails))
    return project


@pytest.mark.parametrize("stat_files", [0, 1, 3], ids=["no-stat", "one-stat", "all-stat"])
def test_a_rebase_asks_git_for_diffstats_only_when_a_file_shows_one(
    tmp_path: Path, stat_files: int
) -> None:
    """A file that carries a diffstat has it regenerated (its counts changed with the
    patch); a file without one stays without; with no stat in any file, git is never
    asked for one."""
    project = _half_upstreamed(tmp_path, stat_files=stat_files)
    files = sorted((project / "patches").iterdir())
    assert [" 1 file changed, 2 insertions(+), 2 deletions(-)" in p.read_text() for p in files] == [
        i < stat_files for i in range(3)
    ]
    _git_calls(tmp_path, project, "rebase", "--onto", "v2")
    asked = [c for c in (tmp_path / "calls.log").read_text().splitlines() if "--stat" in c]
    assert bool(asked) == (stat_files > 0), asked
    assert len(asked) <= 1, asked  # those a rebase may need, together
    for i, path in enumerate(files):
        text = path.read_text()
        assert f"+v3 = {300 + i}" in text and f"+v5 = {500 + i}" not in text
        assert (" 1 file changed, 1 insertion(+), 1 deletion(-)" in text) == (i < stat_files)
        assert "2 insertions" not in text


def test_a_rebase_keeps_a_diffstat_that_still_holds_without_asking_git(tmp_path: Path) -> None:
    """Where a patch's context changed but not its lines (the same lines added and
    removed), its file's diffstat still holds: the file is rewritten with the block as
    it was, and git is not asked for a diffstat."""
    project = _half_upstreamed(tmp_path, stat_files=2, moved=True)
    files = sorted((project / "patches").iterdir())
    before = [p.read_text() for p in files]
    _git_calls(tmp_path, project, "rebase", "--onto", "v2")
    assert [c for c in (tmp_path / "calls.log").read_text().splitlines() if "--stat" in c] == []
    for i, path in enumerate(files):
        text = path.read_text()
        assert text != before[i] and f" v8 = {800 + i}" in text  # rewritten: the new context
        stat = " 1 file changed, 2 insertions(+), 2 deletions(-)"
        assert (stat in text) == (i < 2)
        assert text.partition("diff --git")[0] == before[i].partition("diff --git")[0]


def test_a_rebase_finish_begins_its_diffs_and_stats_beside_the_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The finish's one `diff-tree --stdin` of the refreshed commits, and its one batch
    of diffstats, are begun (they run on another core), none run while forkpatch waits;
    each old file is parsed once, while git diffs or by its render, never both; and
    the files are what the rebase wrote before."""
    import forkpatch.git
    import forkpatch.patchtext
    from support.cli import fp_in

    project = _half_upstreamed(tmp_path, stat_files=3)
    begun: list[tuple[str, ...]] = []
    ran: list[tuple[str, ...]] = []
    parsed: list[str] = []
    real_begin, real_run = forkpatch.git.Git.begin, forkpatch.git.Git.run
    real_parse = forkpatch.patchtext.parse_patch

    def begin(self, *args, **kw):
        begun.append(args)
        return real_begin(self, *args, **kw)

    def run(self, *args, **kw):
        ran.append(args)
        return real_run(self, *args, **kw)

    def parse(data, *, source, **kw):
        parsed.append(source)
        return real_parse(data, source=source, **kw)

    monkeypatch.setattr(forkpatch.git.Git, "begin", begin)
    monkeypatch.setattr(forkpatch.git.Git, "run", run)
    monkeypatch.setattr(forkpatch.patchtext, "parse_patch", parse)
    code, _out, err = fp_in(project, "rebase", "--onto", "v2")
    assert code == 0, err
    diffs = [a for a in begun if a[:2] == ("diff-tree", "--stdin") and "-p" in a]
    stats = [a for a in begun if a[:2] == ("diff-tree", "--stdin") and "--stat=72" in a]
    assert len(diffs) == 1 and len(stats) == 1, begun
    assert [a for a in ran if a[:1] == ("diff-tree",)] == []
    old_files = [s for s in parsed if s.startswith("patches/")]
    assert sorted(old_files) == sorted(set(old_files)) and len(old_files) == 3
    for i, path in enumerate(sorted((project / "patches").iterdir())):
        text = path.read_text()
        assert f"+v3 = {300 + i}" in text and f"+v5 = {500 + i}" not in text
        assert " 1 file changed, 1 insertion(+), 1 deletion(-)" in text
