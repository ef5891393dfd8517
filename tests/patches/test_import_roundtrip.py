"""import (format-patch, mbox, plain diffs, quilt) and the export round trips."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from support.cli import Runner
from support.git import ScratchRepo, git, tree_files
from support.projects import EXAMPLE_NAMES, copy_example, load, mtimes, snapshot


def _odd_fork(tmp_path) -> tuple[ScratchRepo, list]:
    """A fork at tag v1 and one commit on top with every odd kind of change."""
    fork = ScratchRepo(tmp_path / "fork")
    fork.add_file("crlf.txt", b"a\r\nb\r\nc\r\n")
    fork.add_file("nonl.txt", b"no newline")
    fork.add_file("run.sh", "#!/bin/sh\necho hi\n")
    fork.add_file("long.txt", "".join(f"line {i}\n" for i in range(1, 31)))
    fork.add_file("gone.txt", "old\n")
    fork.add_file("torename.txt", "".join(f"keep {i}\n" for i in range(20)))
    fork.add_file("bin.dat", bytes(range(256)) * 2)
    fork.commit("base")
    fork.tag("v1")
    fork.git("checkout", "-q", "-b", "work")
    fork.add_file("crlf.txt", b"a\r\nB\r\nc\r\nd")
    fork.add_file("nonl.txt", b"no newline, still")
    (fork.path / "run.sh").chmod(0o755)
    fork.remove_file("gone.txt")
    fork.git("mv", "torename.txt", "renamed.txt")
    fork.add_file("renamed.txt", "".join(f"keep {i}\n" for i in range(20)) + "more\n")
    fork.add_file("new.txt", "new\n")
    fork.add_file("bin.dat", bytes(range(255, -1, -1)) * 3)
    fork.add_file("newbin.dat", b"\x00\x01\x02binary\xff" * 10)
    (fork.path / "link").symlink_to("long.txt")
    fork.commit("odd-things: every odd kind of change\n\nA description.")
    fork.add_file(
        "long.txt", "".join(f"line {i}\n" for i in range(1, 31)).replace("line 7\n", "line seven\n")
    )
    fork.commit("second: a plain one")
    out = tmp_path / "incoming"
    fork.git("format-patch", "-q", "--zero-commit", "-o", str(out), "v1..work")
    fork.git("format-patch", "-q", "--zero-commit", "--stdout", "v1..work")
    files = sorted(out.glob("*.patch"))
    fork.git("checkout", "-q", "main")
    return fork, files


def _project(tmp_path, capsys, fork, name="project") -> tuple:
    project = tmp_path / name
    project.mkdir()
    run = Runner(project, capsys)
    run("init", "--fork-url", str(fork.path), "--base", "v1")
    return project, run


def test_odd_changes_round_trip_exactly(tmp_path, capsys):
    fork, files = _odd_fork(tmp_path)
    project, run = _project(tmp_path, capsys, fork)
    run("import", *map(str, files))
    series = load(project)
    # Third-party mails: the subject is the summary, whole; the slug only names the patch.
    assert series.names() == ["odd-things-every-odd-kind-of-change", "second-a-plain-one"]
    assert series.patches[0].summary == "odd-things: every odd kind of change"
    assert [p.file for p in series.patches] == [f.name for f in files]
    first = snapshot(project)
    for f in files:  # kept byte for byte: mail headers, diffstat, index lines, signature
        assert first[f"patches/{f.name}"] == f.read_bytes()
    run("apply")
    wt = project / ".forkpatch" / "worktree"
    # The applied tree is exactly the fork's commit.
    assert git(wt, "rev-parse", "HEAD^{tree}") == fork.rev("work^{tree}")
    assert tree_files(wt)["crlf.txt"] == ("file", b"a\r\nB\r\nc\r\nd")
    assert tree_files(wt)["run.sh"][0] == "exec"
    assert tree_files(wt)["link"] == ("link", b"long.txt")
    # The work tree's commit says the description, not the mail headers or the diffstat.
    message = git(wt, "log", "-1", "--format=%B", "HEAD~1")
    assert message.startswith("odd-things-every-odd-kind-of-change: odd-things: every odd")
    assert "A description." in message and "From:" not in message and "|" not in message
    m = mtimes(project)
    run("export")
    assert snapshot(project) == first and mtimes(project) == m

    # Asked for forkpatch's own form: description + canonical diff, <name>.patch.
    project2, run2 = _project(tmp_path, capsys, fork, "project2")
    run2("import", "--canonical", *map(str, files))
    s2 = load(project2)
    assert [p.file for p in s2.patches] == [f"{n}.patch" for n in s2.names()]
    own = snapshot(project2)
    odd = own["patches/odd-things-every-odd-kind-of-change.patch"]
    assert odd.startswith(b"A description.\n\ndiff --git ")
    assert b"\r\n" in odd and b"From:" not in odd and b"-- \n" not in odd
    run2("apply")
    wt2 = project2 / ".forkpatch" / "worktree"
    assert tree_files(wt2) == tree_files(wt)
    run2("export")
    assert snapshot(project2) == own

    # A third round: the canonical files imported again give the same bytes.
    project3, run3 = _project(tmp_path, capsys, fork, "project3")
    run3("import", *(str(project2 / "patches" / p.file) for p in s2.patches))
    s3 = snapshot(project3)
    assert {k: v for k, v in s3.items() if k.startswith("patches/")} == {
        k: v for k, v in own.items() if k.startswith("patches/")
    }
    run3("apply")
    assert tree_files(project3 / ".forkpatch" / "worktree") == tree_files(wt)
    run3("export")
    assert snapshot(project3) == s3


def test_example_export_is_a_fixed_point(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    first = ex.snap()
    ex.run("apply")
    m = mtimes(ex.project)
    ex.run("export")
    ex.run("refresh")
    assert ex.snap() == first and mtimes(ex.project) == m
    p2 = tmp_path / "p2"
    p2.mkdir()
    run2 = Runner(p2, capsys)
    run2("init", "--fork-url", str(ex.fork.path), "--base", "v1.2.1")
    run2("import", *(str(ex.patch(n)) for n in EXAMPLE_NAMES))
    run2("status")
    # import and status apply in memory: no work tree, no checkout anywhere.
    assert not (p2 / ".forkpatch" / "worktree").exists()
    assert git(p2 / ".forkpatch" / "repo.git", "worktree", "list").count("\n") == 0
    assert {k: v for k, v in snapshot(p2).items() if k != "series.yaml"} == {
        k: v for k, v in first.items() if k != "series.yaml"
    }
    run2("apply")
    assert tree_files(p2 / ".forkpatch" / "worktree") == tree_files(ex.wt)


def test_one_change_rewrites_one_file(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    before, m = ex.snap(), mtimes(ex.project)
    ex.run("edit", "eager-block-cast")
    dg = ex.wt / "vllm/utils/deep_gemm.py"
    dg.write_text(dg.read_text() + "# one more line\n")
    git(ex.wt, "commit", "-q", "-am", "by hand")
    ex.run("export")
    after, m2 = ex.snap(), mtimes(ex.project)
    assert {k for k in after if after[k] != before[k]} == {"patches/eager-block-cast.patch"}
    assert {k for k in m2 if m2[k] != m[k]} == {"patches/eager-block-cast.patch"}


def test_import_mbox_with_several_patches(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys, with_project=False)
    mbox = tmp_path / "series.mbox"
    mbox.write_bytes(b"".join(p.read_bytes() for p in ex.incoming))
    ex.run("init", "--fork-url", str(ex.fork.path), "--base", "v1.2.1")
    _, _, _err = ex.run("import", str(mbox))
    assert load(ex.project).names() == EXAMPLE_NAMES
    ref = copy_example(tmp_path / "ref", capsys)
    for n in EXAMPLE_NAMES:
        assert ex.patch(n).read_bytes() == ref.patch(n).read_bytes()


def test_import_plain_diff_with_name_and_after(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    diff = (
        "Describe it.\n\n--- a/README.md\n+++ b/README.md\n@@ -1,5 +1,5 @@\n"
        " # 1Cat-vLLM (example)\n \n-A scratch repository shaped like the fork.\n"
        "+A scratch repository shaped like the fork (patched).\n \n ## Release 1.2.1\n"
    )
    (tmp_path / "readme.diff").write_text(diff)
    ex.run(
        "import", str(tmp_path / "readme.diff"), "--name", "readme", "--after", "capability-floor"
    )
    assert load(ex.project).names()[:2] == ["capability-floor", "readme"]
    # The file keeps its name and its bytes (a plain diff without `diff --git`).
    assert load(ex.project).get("readme").file == "readme.diff"
    assert (ex.project / "patches" / "readme.diff").read_text() == diff
    assert load(ex.project).get("readme").summary == "Describe it."
    ex.run("apply")
    assert "(patched)" in (ex.wt / "README.md").read_text()
    ex.run("export")
    assert (ex.project / "patches" / "readme.diff").read_text() == diff
    # --rename stores the same bytes under the patch's name; --canonical the canonical form.
    (tmp_path / "Add_Notes.DIFF").write_text(
        "--- /dev/null\n+++ b/NOTES.md\n@@ -0,0 +1 @@\n+notes\n"
    )
    (tmp_path / "more.diff").write_text("--- /dev/null\n+++ b/MORE.md\n@@ -0,0 +1 @@\n+more\n")
    ex.run("import", "--rename", str(tmp_path / "Add_Notes.DIFF"))
    assert load(ex.project).get("add_notes").file == "add_notes.patch"
    assert ex.patch("add_notes").read_bytes() == (tmp_path / "Add_Notes.DIFF").read_bytes()
    ex.run("import", "--canonical", str(tmp_path / "more.diff"))
    assert ex.patch("more").read_text() == (
        "diff --git a/MORE.md b/MORE.md\nnew file mode 100644\n--- /dev/null\n+++ b/MORE.md\n"
        "@@ -0,0 +1 @@\n+more\n"
    )


def _quilt_dir(tmp_path):
    qp = tmp_path / "qp"
    qp.mkdir()
    (qp / "first.patch").write_text(
        "Make line 3 louder.\n\nIndex: b/long.txt\n" + "=" * 67 + "\n"
        "--- a/long.txt\n+++ b/long.txt\n@@ -1,5 +1,5 @@\n line 1\n line 2\n-line 3\n"
        "+LINE 3\n line 4\n line 5\n"
    )
    (qp / "sub").mkdir()
    (qp / "sub" / "second.diff").write_text(
        "--- a/long.txt\n+++ b/long.txt\n@@ -26,5 +26,6 @@\n line 26\n line 27\n line 28\n"
        "+line 28.5\n line 29\n line 30\n--- /dev/null\n+++ b/added/file.txt\n"
        "@@ -0,0 +1,2 @@\n+hello\n+world\n"
    )
    (qp / "series").write_text("# quilt series\nfirst.patch\n\nsub/second.diff -p1\n")
    return qp


@pytest.mark.skipif(shutil.which("quilt") is None, reason="quilt is not installed")
def test_import_quilt_gives_the_tree_of_quilt_push(tmp_path, capsys):
    fork, _ = _odd_fork(tmp_path)
    qp = _quilt_dir(tmp_path)
    # quilt itself, for real, in a copy of the fork at the base.
    qfork = tmp_path / "qfork"
    git(tmp_path, "clone", "-q", "--branch", "v1", str(fork.path), str(qfork))
    subprocess.run(
        ["quilt", "push", "-a", "-q"],
        cwd=qfork,
        check=True,
        env={"QUILT_PATCHES": str(qp), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
    )
    project, run = _project(tmp_path, capsys, fork)
    run("import", "--quilt", str(qp))
    assert load(project).names() == ["first", "second"]
    assert load(project).get("first").summary == "Make line 3 louder."
    run("apply")
    wt = project / ".forkpatch" / "worktree"
    assert tree_files(wt) == tree_files(qfork)
    assert "LINE 3" in (wt / "long.txt").read_text()


BAD_QUILT = [
    ("../x.patch\n", "outside"),
    ("missing.patch\n", "does not exist"),
    ("first.patch -R\n", "unsupported quilt options"),
]


@pytest.mark.parametrize(("series", "message"), BAD_QUILT)
def test_bad_quilt_series_changes_nothing(tmp_path, capsys, series, message):
    fork, _ = _odd_fork(tmp_path)
    qp = _quilt_dir(tmp_path)
    (qp / "series").write_text(series)
    project, run = _project(tmp_path, capsys, fork)
    before = snapshot(project)
    _, _, err = run("import", "--quilt", str(qp), expect=2)
    assert message in err and "series:1" in err
    assert snapshot(project) == before


def test_import_refusals_change_nothing(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    before = snapshot(ex.project)
    # Already imported (same names).
    _, _, err = ex.run("import", str(ex.incoming[0]), expect=2)
    assert "already exists" in err
    # Not a patch at all.
    junk = tmp_path / "junk.diff"
    junk.write_text("hello\n")
    _, _, err = ex.run("import", str(junk), expect=1)
    assert "junk.diff" in err and "Traceback" not in err
    # Does not apply: names the patch, the file and the hunk; nothing imported.
    bad = tmp_path / "bad.diff"
    bad.write_text("--- a/README.md\n+++ b/README.md\n@@ -1,2 +1,2 @@\n-no such line\n+x\n \n")
    _, _, err = ex.run("import", str(bad), expect=3)
    assert "'bad'" in err and "README.md" in err and "hunk 1" in err
    assert "nothing was imported" in err
    # A good patch followed by a bad one: all or nothing.
    good = tmp_path / "good.diff"
    good.write_text("--- /dev/null\n+++ b/NEW.md\n@@ -0,0 +1 @@\n+new\n")
    ex.run("import", str(good), str(bad), expect=3)
    ex.run("import", expect=2)
    ex.run("import", "--name", "x", str(good), str(bad), expect=2)
    assert snapshot(ex.project) == before
    assert not (ex.project / "patches" / "good.patch").exists()


@pytest.mark.parametrize("form", ["format-patch", "plain-diff", "mbox-of-two"])
def test_a_patch_saved_with_crlf_throughout_imports_as_git_am_would(tmp_path, capsys, form):
    """A patch whose every line ends in CRLF (saved by a Windows mail client or editor)
    against LF files: the CRs are stripped, with a warning, and the result is what the
    LF patch gives. A CRLF file patched by a CRLF patch is not touched (see above)."""
    fork = ScratchRepo(tmp_path / "fork")
    text = "".join(f"line {i}\n" for i in range(1, 21))
    fork.add_file("a.txt", text)
    fork.add_file("b.txt", text)
    fork.commit("base")
    fork.tag("v1")
    fork.git("checkout", "-q", "-b", "work")
    fork.add_file("a.txt", text.replace("line 3\n", "line three\n"))
    fork.commit("one: first")
    fork.add_file("b.txt", text.replace("line 9\n", "line nine\n"))
    fork.commit("two: second")
    out = tmp_path / "incoming"
    fork.git("format-patch", "-q", "--zero-commit", "-o", str(out), "v1..work")
    lf = sorted(out.glob("*.patch"))
    fork.git("checkout", "-q", "main")
    if form == "plain-diff":
        sources = {"p.diff": git(fork.path, "diff", "v1", "work", "--", "a.txt").encode() + b"\n"}
    elif form == "mbox-of-two":
        sources = {"two.mbox": b"".join(p.read_bytes() for p in lf)}
    else:
        sources = {p.name: p.read_bytes() for p in lf}
    crlf_dir = tmp_path / "crlf"
    crlf_dir.mkdir()
    paths = []
    for name, data in sources.items():
        path = crlf_dir / name
        path.write_bytes(data.replace(b"\n", b"\r\n"))
        paths.append(str(path))
    project, run = _project(tmp_path, capsys, fork)
    _, _, err = run("import", *paths)
    assert "CRLF" in err and "git am" in err
    for written in (project / "patches").glob("*"):
        assert b"\r" not in written.read_bytes(), written
    run("apply")
    wt = project / ".forkpatch" / "worktree"
    assert (wt / "a.txt").read_text() == text.replace("line 3\n", "line three\n")
    assert git(wt, "status", "--porcelain") == ""
    before = snapshot(project)
    run("export")
    assert snapshot(project) == before
