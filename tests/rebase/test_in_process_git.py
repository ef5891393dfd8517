"""The in-process git layer (libgit2, ``forkpatch.gitobj``) against git's CLI, the oracle.

3-way file merges give byte for byte what ``git merge-file -p --diff3`` prints and the
same number of conflicting regions, on scratch cases (each edge of the merge) and on
the real fork: pairs of its releases, and the repository's own series on v1.3.0 and
on the fork's head. Trees listed, names resolved, objects read and the stack's
first-parent walk are what ``git ls-tree``, ``rev-parse``, ``cat-file`` and ``log``
give. libgit2 reads no global configuration.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from forkpatch import applier, gitobj
from forkpatch.git import CatFileReader, Git, git_env
from forkpatch.patchfile import parse_patch
from forkpatch.series import load_series
from support import REPO_ROOT, realfork
from support.git import ScratchRepo

LABELS = ("stack", "old base", "patch p-1")


def git_merge_file(tmp: Path, ours: bytes, base: bytes, theirs: bytes, labels=LABELS):
    """What ``git merge-file -p --diff3`` prints and its conflict count (None: refused)."""
    tmp.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
        (tmp / name).write_bytes(data)
        paths.append(str(tmp / name))
    args = [a for label in labels for a in ("-L", label)]
    proc = subprocess.run(
        ["git", "merge-file", "-p", "--diff3", *args, *paths], capture_output=True, env=git_env()
    )
    if proc.returncode > 127:
        return None, 1
    return proc.stdout, proc.returncode


def _numbered(n: int, prefix: str = "line") -> bytes:
    return b"".join(b"%s %d\n" % (prefix.encode(), i) for i in range(n))


def _edit(text: bytes, i: int, new: bytes) -> bytes:
    lines = text.splitlines(keepends=True)
    lines[i] = new
    return b"".join(lines)


BASE = _numbered(30)
SCRATCH = {
    "clean, apart": (_edit(BASE, 3, b"ours 3\n"), BASE, _edit(BASE, 25, b"theirs 25\n")),
    "conflict, one region": (_edit(BASE, 10, b"ours\n"), BASE, _edit(BASE, 10, b"theirs\n")),
    "conflict, two regions": (
        _edit(_edit(BASE, 2, b"o2\n"), 20, b"o20\n"),
        BASE,
        _edit(_edit(BASE, 2, b"t2\n"), 20, b"t20\n"),
    ),
    "adjacent lines": (_edit(BASE, 10, b"ours\n"), BASE, _edit(BASE, 11, b"theirs\n")),
    "the same change on both sides": (_edit(BASE, 5, b"same\n"), BASE, _edit(BASE, 5, b"same\n")),
    "first and last line": (_edit(BASE, 0, b"o0\n"), BASE, _edit(BASE, 29, b"t29\n")),
    "no newline at the end": (BASE + b"tail", BASE + b"tail", BASE + b"tail, theirs"),
    "no newline, both change the end": (BASE + b"ours", BASE + b"tail", BASE + b"theirs"),
    "CRLF lines": (
        _edit(BASE.replace(b"\n", b"\r\n"), 4, b"ours\r\n"),
        BASE.replace(b"\n", b"\r\n"),
        _edit(BASE.replace(b"\n", b"\r\n"), 4, b"theirs\r\n"),
    ),
    "empty base": (b"ours\n", b"", b"theirs\n"),
    "empty sides": (b"", BASE, b""),
    "ours empty (deleted), theirs changed": (b"", BASE, _edit(BASE, 3, b"theirs\n")),
    "theirs empty (deleted), ours changed": (_edit(BASE, 3, b"ours\n"), BASE, b""),
    "all three differ, base empty": (b"ours\n", b"", b"theirs\n"),
    "one side deletes the region": (
        b"".join(BASE.splitlines(keepends=True)[:10] + BASE.splitlines(keepends=True)[15:]),
        BASE,
        _edit(BASE, 12, b"theirs\n"),
    ),
    "latin-1 and invalid UTF-8 bytes": (
        _edit(BASE, 7, b"caf\xe9 \xff\xfe\n"),
        BASE,
        _edit(BASE, 7, b"na\xefve\n"),
    ),
    "marker-like lines in the content": (
        _edit(BASE, 3, b"<<<<<<< stack\n"),
        BASE,
        _edit(BASE, 20, b">>>>>>> patch p-1\n"),
    ),
    "insertions at one place": (
        BASE.replace(b"line 9\n", b"line 9\nours a\nours b\n"),
        BASE,
        BASE.replace(b"line 9\n", b"line 9\ntheirs a\n"),
    ),
}


@pytest.mark.parametrize("case", sorted(SCRATCH))
def test_a_file_merge_is_git_merge_files(tmp_path, case):
    ours, base, theirs = SCRATCH[case]
    assert gitobj.merge_file(ours, base, theirs, LABELS) == git_merge_file(
        tmp_path, ours, base, theirs
    )


@pytest.mark.parametrize(
    "labels", [("your edit", "old base", "patch x"), ("ü label", "b a s e", "t-h-e-i-r-s")]
)
def test_the_labels_are_git_merge_files(tmp_path, labels):
    ours, base, theirs = SCRATCH["conflict, two regions"]
    got = gitobj.merge_file(ours, base, theirs, labels)
    assert got == git_merge_file(tmp_path, ours, base, theirs, labels) and got[1] == 2


def test_merges_side_by_side_are_git_merge_files(tmp_path):
    """Merges in threads (their blobs in one scratch store) each give what git
    merge-file gives."""
    from concurrent.futures import ThreadPoolExecutor

    cases = [SCRATCH[c] for c in sorted(SCRATCH)] * 6
    with ThreadPoolExecutor(max_workers=6) as pool:
        got = list(pool.map(lambda sides: gitobj.merge_file(*sides, LABELS), cases))
    want = {c: git_merge_file(tmp_path, *SCRATCH[c]) for c in sorted(SCRATCH)}
    assert got == [want[c] for c in sorted(SCRATCH)] * 6


def test_a_binary_side_is_no_merge_as_git_refuses_it(tmp_path):
    """git merge-file refuses a binary file; the merge gives no content (a conflict to
    resolve by hand), never an empty file that would replace the real one."""
    ours, base, theirs = b"a\0\nb\n", b"a\0\nc\n", b"a\0\nd\n"
    assert git_merge_file(tmp_path, ours, base, theirs) == (None, 1)
    assert gitobj.merge_file(ours, base, theirs, LABELS) == (None, 1)


# --------------------------------------------------------------------------- the real fork


def _fork() -> Git:
    fork = realfork.fork_or_skip()
    realfork.tags_or_skip("v1.2.1", "v1.3.0")
    return Git(Path(realfork.git_dir(fork)))


def _changed(git: Git, a: str, b: str) -> set[str]:
    out = git.run("diff", "--name-only", "-z", "--no-renames", a, b).stdout
    return {p.decode() for p in out.split(b"\0") if p}


def _blob(git: Git, rev: str, path: str) -> bytes:
    proc = git.run("cat-file", "blob", f"{rev}:{path}", check=False)
    return proc.stdout if proc.returncode == 0 else b""


@pytest.mark.real_fork
def test_merges_of_the_forks_releases_are_git_merge_files(tmp_path):
    """Every text file both v1.2.1..v1.3.0 and v1.3.0..main change, merged each way the
    three versions combine: git's bytes and conflict counts, conflicts included."""
    git = _fork()
    files = sorted(_changed(git, "v1.2.1", "v1.3.0") & _changed(git, "v1.3.0", "main"))
    assert files, "no file changed on both sides"
    compared = conflicted = 0
    for path in files[:60]:
        v121, v130, head = (_blob(git, rev, path) for rev in ("v1.2.1", "v1.3.0", "main"))
        if gitobj.is_binary(v121 + v130 + head):
            continue
        for ours, base, theirs in ((v130, v121, head), (head, v130, v121), (v121, head, v130)):
            got = gitobj.merge_file(ours, base, theirs, LABELS)
            want = git_merge_file(tmp_path / "m", ours, base, theirs)
            assert got == want, path
            compared += 1
            conflicted += bool(want[1])
    assert compared >= 6 and conflicted, (compared, conflicted)


@pytest.mark.real_fork
@pytest.mark.parametrize("onto", ["v1.3.0", "main"])
def test_merges_of_the_repositorys_series_are_git_merge_files(tmp_path, onto):
    """Each file of the repository's own patches, in series order: the fork at ``onto``
    (ours), the file with the patches below applied on the series' base v1.2.1 (the
    merge base) and with this one too (theirs), as a rebase merges it."""
    git = _fork()
    series = load_series(REPO_ROOT / "series.yaml")
    files: dict[str, bytes] = {}
    compared = 0
    for entry in series.patches:
        if entry.file is None:
            continue
        data = (REPO_ROOT / "patches" / entry.file).read_bytes()
        for fp in parse_patch(data, source=entry.file).files:
            if fp.is_binary or fp.old_path is None or fp.new_path is None:
                continue
            base = files.get(fp.old_path)
            if base is None:
                base = _blob(git, "v1.2.1", fp.old_path)
            theirs = applier.apply_file_patch(base, fp, max_fuzz=0).content or b""
            files[fp.new_path] = theirs
            ours = _blob(git, onto, fp.new_path)
            got = gitobj.merge_file(ours, base, theirs, LABELS)
            assert got == git_merge_file(tmp_path / "m", ours, base, theirs), fp.path
            compared += 1
    assert compared >= 4


@pytest.mark.real_fork
def test_trees_names_objects_and_walks_are_gits(tmp_path):
    git = _fork()
    for rev in ("v1.2.1", "v1.3.0^{tree}", "main~3"):
        assert git.ls_tree(rev) == git.ls_tree_cli(rev), rev
    names = [
        "v1.3.0",
        "v1.3.0^{commit}",
        "v1.3.0^{tree}",
        "main~2",
        "main^",
        "v1.2.1:README.md",
        "refs/tags/v1.2.1",
        "4e9fdbc8071",
        "no-such-name",
        "v1.3.0:no/such/file",
        "-v",
    ]
    for name in names:
        proc = git.run("rev-parse", "-q", "--verify", "--end-of-options", name, check=False)
        want = proc.stdout.decode().strip() if proc.returncode == 0 else None
        assert git.rev_parse(name) == want, name
    for a, b in (("v1.2.1", "v1.3.0"), ("v1.3.0", "main"), ("v1.2.2", "v1.2.1")):
        raw = git.run("diff", "--no-renames", "--name-only", "-z", a, b).stdout
        assert git.objects.changed_paths(a, b) == [p.decode() for p in raw.split(b"\0") if p]
        raw = git.run("diff-tree", "-r", "-z", "--raw", "--full-index", "--no-renames", a, b)
        assert git.objects.raw_changes(a, b) == _fields(raw.stdout), (a, b)
    entries = list(git.ls_tree("v1.3.0").items())[::97]
    with git.reader() as mine, CatFileReader(git) as theirs:
        for _path, (_mode, oid) in entries:
            assert mine.read(oid) == theirs.read(oid)
        assert mine.read("v1.3.0") == theirs.read("v1.3.0")
        assert mine.read("0" * 40) is None and theirs.read("0" * 40) is None
    log = git.run(
        "log", "--first-parent", "--reverse", "--format=%H %P", "v1.2.1..v1.3.0"
    ).stdout.decode()
    want = [(line.split()[0], line.split()[1]) for line in log.splitlines()]
    got = git.first_parents("v1.2.1", "v1.3.0")
    assert [(c, p) for c, p, _m in got] == want and len(want) > 3
    subjects = git.run("log", "--format=%B%x00", "-3", "v1.3.0").stdout.decode().split("\0")
    assert [m for _c, _p, m in got[-3:]][::-1] == [s.strip("\n") for s in subjects[:3]]


def test_libgit2_reads_no_global_or_system_config(tmp_path, monkeypatch):
    """A hostile ~/.gitconfig and XDG file (a reflog for every ref, another identity)
    reach neither what forkpatch reads nor what it writes in process."""
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    hostile = "[core]\n\tlogAllRefUpdates = always\n[user]\n\tname = Hostile\n"
    (home / ".gitconfig").write_text(hostile)
    (home / ".config" / "git" / "config").write_text(hostile)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    repo = ScratchRepo(tmp_path / "repo")
    repo.add_file("a.txt", "a\n")
    repo.commit("one")
    git = Git(repo.path / ".git")
    config = git.objects.repo.config
    assert "user.name" not in config
    assert "core.logAllRefUpdates" not in config or config["core.logAllRefUpdates"] != "always"
    head = git.rev_parse("HEAD")
    assert head is not None
    git.update_ref("refs/forkpatch/probe", head)
    assert git.rev_parse("refs/forkpatch/probe") == head
    assert not (repo.path / ".git" / "logs" / "refs" / "forkpatch").exists()


def test_commits_take_any_revision_as_parent_as_git_commit_tree_does(tmp_path):
    """``X^`` or a ref as a parent (git commit-tree and fast-import's ``from`` take
    them) is resolved to its commit, in a commit of its own and in a queued import."""
    repo = tmp_path / "r"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for n in ("a", "b"):
        (repo / "f").write_text(n + "\n")
        subprocess.run(["git", "-C", str(repo), "add", "f"], check=True)
        subprocess.run(
            [
                "git",
                "-C",
                str(repo),
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-qm",
                n,
            ],
            check=True,
        )
    g = Git(repo)
    head = g.rev_parse("HEAD")
    first = g.rev_parse("HEAD^")
    tree = g.tree_of("HEAD")
    made = g.commit_tree("HEAD^{tree}", ["HEAD^"], "m\n")
    parents = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", f"{made}^@", f"{made}^{{tree}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert parents == [first, tree] and head != first
    with pytest.raises(Exception, match="no commit"):
        g.commit_tree(tree, ["no-such-ref"], "m\n")


MESSAGES = {
    "one line": b"fix the thing\n",
    "paragraph of lines": b"fix the thing\nacross two lines  \n\nbody\n",
    "blank lines first": b"\n\n  indented subject\t\n\nbody\n",
    "white space only line ends it": b"subject\n \t\nbody\n",
    "latin-1 with its header": "caf\u00e9 fix\n".encode("latin-1"),
    "invalid UTF-8": b"bad \xff byte\n",
    "no newline": b"no newline at the end",
}


def test_commits_and_subjects_are_cat_file_and_git_logs(tmp_path):
    """Objects.commits: the commit each name peels to and its subject, as `git cat-file
    --batch-check` of `NAME^{commit}` and `git log --no-walk --format=%s` give them; an
    unknown, ambiguous or non-commit name is left out as cat-file leaves it out."""
    repo = ScratchRepo(tmp_path / "r")
    repo.add_file("a.txt", "one\n")
    base = repo.commit("base")
    git = Git(repo.path / ".git")
    tree = git.tree_of(base)
    made = {}
    for label, message in MESSAGES.items():
        headers = b"tree %s\nparent %s\n" % (tree.encode(), base.encode())
        who = b"A U Thor <a@example.invalid> 1700000000 +0000"
        headers += b"author " + who + b"\ncommitter " + who + b"\n"
        if label.startswith("latin-1"):
            headers += b"encoding ISO-8859-1\n"
        raw = headers + b"\n" + message
        written = git.run("hash-object", "-t", "commit", "-w", "--stdin", input=raw)
        made[label] = written.stdout.decode().strip()
    repo.git("tag", "-a", "-m", "annotated", "t-annotated", made["one line"])
    names = [*made.values(), "t-annotated", "HEAD", tree, "no-such", base[:4], "-v", ""]
    got = git.objects.commits(names)
    for name in names:
        if not name:
            assert name not in got
            continue
        check = (
            git.run(
                "cat-file",
                "--batch-check=%(objectname) %(objecttype)",
                input=f"{name}^{{commit}}\n".encode(),
            )
            .stdout.decode()
            .split()
        )
        if len(check) != 2 or check[1] != "commit":
            assert name not in got, name
            continue
        subject = git.run("log", "--no-walk", "--format=%s", check[0]).stdout
        assert got[name] == (check[0], subject.decode("utf-8", "replace").rstrip("\n")), name


def test_peeled_names_are_cat_files(tmp_path):
    """Objects.peel: a name's object, peeled of every tag object, and its type, as `git
    cat-file --batch-check` of NAME and NAME^{} gives them (tags of tags, of a tree, of
    a blob, lightweight; unknown names)."""
    repo = ScratchRepo(tmp_path / "r")
    repo.add_file("a.txt", "one\n")
    commit = repo.commit("base")
    repo.git("tag", "light", commit)
    repo.git("tag", "-a", "-m", "a", "annotated", commit)
    repo.git("tag", "-a", "-m", "o", "outer", "annotated")
    repo.git("tag", "-a", "-m", "t", "of-tree", f"{commit}^{{tree}}")
    repo.git("tag", "-a", "-m", "b", "of-blob", f"{commit}:a.txt")
    git = Git(repo.path / ".git")
    for name in ("light", "annotated", "outer", "of-tree", "of-blob", "nothing", "HEAD"):
        ref = f"refs/tags/{name}" if name != "HEAD" else name
        out = git.run(
            "cat-file",
            "--batch-check=%(objectname) %(objecttype)",
            input=f"{ref}\n{ref}^{{}}\n".encode(),
        ).stdout.decode()
        lines = [line.split() for line in out.splitlines()]
        want = None
        kinds = ("commit", "tree", "blob", "tag")  # else "missing" or "ambiguous"
        if all(len(parts) == 2 and parts[1] in kinds for parts in lines):
            want = (lines[0][0], lines[1][0], lines[1][1])
        assert git.objects.peel(ref) == want, name


def _fields(raw: bytes) -> list[tuple[str, str, str, str, str]]:
    """The (old mode, new mode, old id, new id, path) of `git diff-tree -r -z --raw`."""
    parts = raw.split(b"\0")
    out = []
    for i in range(0, len(parts) - 1, 2):
        if not parts[i].startswith(b":"):
            continue
        old_mode, new_mode, old_id, new_id, _status = parts[i][1:].decode().split()
        out.append((old_mode, new_mode, old_id, new_id, parts[i + 1].decode()))
    return out


def _sides(fields):
    """path -> (before, after) entries, as a reader of the fields sees them."""
    out: dict[str, list] = {}
    for old_mode, new_mode, old_id, new_id, path in fields:
        got = out.setdefault(path, [None, None])
        if old_mode != "000000":
            got[0] = (old_mode, old_id)
        if new_mode != "000000":
            got[1] = (new_mode, new_id)
    return out


def test_raw_changes_are_git_diff_tree_raws(tmp_path):
    """Objects.raw_changes between two trees: the fields of `git diff-tree -r --raw
    --full-index --no-renames`, in its order (changed, added, deleted, a mode change, a
    file become a link, nested directories, a directory become a file, names that
    sort around a directory's), both ways."""
    repo = ScratchRepo(tmp_path / "r")
    repo.add_file("a.txt", "one\n")
    repo.add_file("gone.txt", "bye\n")
    repo.add_file("run.sh", "echo\n")
    repo.add_file("d/e/f.txt", "deep\n")
    repo.add_file("x/y.txt", "was a directory\n")
    repo.add_file("link", "target\n")
    old = repo.commit("old")
    repo.add_file("a.txt", "two\n")
    repo.remove_file("gone.txt")
    (repo.path / "run.sh").chmod(0o755)
    repo.add_file("d/e/g.txt", "new\n")
    repo.add_file("d.e.txt", "sorts before d/ as git sorts it\n")
    repo.add_file("d-f.txt", "and so does this\n")
    repo.add_file("d0", "after d/\n")
    repo.remove_file("x/y.txt")
    if (repo.path / "x").is_dir():
        (repo.path / "x").rmdir()
    repo.add_file("x", "now a file\n")
    (repo.path / "link").unlink()
    (repo.path / "link").symlink_to("a.txt")
    new = repo.commit("new")
    git = Git(repo.path / ".git")
    raw = git.run("diff-tree", "-r", "-z", "--raw", "--full-index", "--no-renames", old, new)
    want = _fields(raw.stdout)
    got = git.objects.raw_changes(old, new)
    assert got == want  # the same entries in the same order, a type change as one
    assert _sides(got) == _sides(want)
    assert git.objects.raw_changes(new, new) == []
    assert git.objects.changed_paths(old, new) == list(dict.fromkeys(f[4] for f in want))
    back = git.run("diff-tree", "-r", "-z", "--raw", "--full-index", "--no-renames", new, old)
    assert git.objects.raw_changes(new, old) == _fields(back.stdout)


def _diff_and_stat_apart(git: Git, a: str, b: str) -> tuple[bytes, str]:
    diff = git.diff_trees(a, b)
    stat = git.run("diff-tree", "--stat=72", "--summary", "-M", "--no-color", a, b).stdout
    return diff, stat.decode("utf-8", "surrogateescape")


def test_one_diff_tree_gives_the_diff_and_its_stat(tmp_path):
    """Git.diff_and_stat: the diff and the `--stat=72 --summary` of two separate calls,
    from one (a rename, a mode change, a binary file, a creation, a deletion, a name with
    a newline, a change of mode alone, no change)."""
    repo = ScratchRepo(tmp_path / "r")
    repo.add_file("moved/from.txt", "".join(f"line {i}\n" for i in range(40)))
    repo.add_file("run.sh", "echo\n")
    repo.add_file("only-mode.sh", "echo\n")
    repo.add_file("gone.txt", "bye\n")
    repo.add_file("blob.bin", b"\0\1\2" * 50)
    old = repo.commit("old")
    repo.remove_file("moved/from.txt")
    repo.add_file("moved/to.txt", "".join(f"line {i}\n" for i in range(41)))
    repo.add_file("run.sh", "echo two\n")
    (repo.path / "run.sh").chmod(0o755)
    (repo.path / "only-mode.sh").chmod(0o755)
    repo.remove_file("gone.txt")
    repo.add_file("blob.bin", b"\0\3\2" * 60)
    repo.add_file("new\nline.txt", "odd name\n")
    new = repo.commit("new")
    git = Git(repo.path / ".git")
    for a, b in ((old, new), (new, old), (new, new)):
        assert git.diff_and_stat(a, b) == _diff_and_stat_apart(git, a, b), (a, b)
    diff, stat = git.diff_and_stat(old, new)
    assert "rename moved/{from.txt => to.txt}" in stat and "mode change" in stat
    assert diff.startswith(b"diff --git ")


@pytest.mark.real_fork
def test_one_diff_tree_gives_the_diff_and_its_stat_on_the_fork():
    git = _fork()
    for a, b in (("v1.2.1", "v1.2.2"), ("main~3", "main")):
        assert git.diff_and_stat(a, b) == _diff_and_stat_apart(git, a, b), (a, b)
