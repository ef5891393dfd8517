"""quilt's -p level: a series line's -p0 (or -p1 names that read otherwise without
it) is honoured on import, and the file is stored so that `git apply` and `quilt
push` read it at -p1 as they do every other file of patches/."""

from __future__ import annotations

import subprocess

from support.cli import Runner
from support.git import ScratchRepo, git, numbered

TEXT = numbered(12)


def _hunk(old: str, new: str, a: str, b: str) -> str:
    return f"--- {a}\n+++ {b}\n@@ -1,3 +1,3 @@\n-{old}\n+{new}\n line 2\n line 3\n"


SERIES = {
    # name: (series line options, patch text, file it changes)
    "p0.patch": ("-p0", _hunk("line 1", "LINE 1", "x.txt", "x.txt"), "x.txt"),
    "sub/p0-top.patch": (
        "-p0   # a comment",
        _hunk("line 1", "LINE 1", "vllm/y.txt", "vllm/y.txt"),
        "vllm/y.txt",
    ),
    # -p1 (quilt's default) with one top directory on both sides: "src/" is stripped.
    "p1-same-top.patch": ("", _hunk("line 1", "LINE 1", "src/z.txt.orig", "src/z.txt"), "z.txt"),
    "normal.patch": ("-p1", _hunk("line 1", "LINE 1", "a/w.txt", "b/w.txt"), "w.txt"),
}


def test_quilt_strip_levels_are_honoured_and_stored_for_git_apply(tmp_path, capsys):
    fork = ScratchRepo(tmp_path / "fork")
    for path in ("x.txt", "vllm/y.txt", "z.txt", "w.txt"):
        fork.add_file(path, TEXT)
    fork.commit("base")
    fork.tag("v1")
    quilt = tmp_path / "quilt"
    quilt.mkdir()
    lines = []
    for name, (opts, text, _file) in SERIES.items():
        (quilt / name).parent.mkdir(parents=True, exist_ok=True)
        (quilt / name).write_text(f"Change {name}.\n\n{text}")
        lines.append(f"{name} {opts}".rstrip())
    (quilt / "series").write_text("\n".join(lines) + "\n")
    project = tmp_path / "project"
    project.mkdir()
    run = Runner(project, capsys)
    run("init", "--fork-url", str(fork.path), "--base", "v1")
    _, _, err = run("import", "--quilt", str(quilt))
    for name in ("p0.patch", "sub/p0-top.patch", "p1-same-top.patch"):
        assert f"{name} is a -p" in err, err
    assert "normal.patch is a" not in err
    # The file that reads the same at -p1 is kept byte for byte; the others are in
    # git's form now.
    assert (project / "patches" / "normal.patch").read_bytes() == (
        quilt / "normal.patch"
    ).read_bytes()
    # Each keeps its name in patches/, subdirectory included.
    assert sorted(
        p.relative_to(project / "patches").as_posix()
        for p in (project / "patches").rglob("*.patch")
    ) == sorted(SERIES)
    for name in ("p0.patch", "sub/p0-top.patch", "p1-same-top.patch"):
        assert "diff --git a/" in (project / "patches" / name).read_text()
    run("apply")
    wt = project / ".forkpatch" / "worktree"
    for _opts, _text, changed in SERIES.values():
        assert (wt / changed).read_text().startswith("LINE 1\n"), changed
    # git apply (at its default -p1) of every stored file gives the same tree.
    ref = tmp_path / "ref"
    git(tmp_path, "clone", "-q", "-b", "v1", str(fork.path), str(ref))
    for name in SERIES:
        subprocess.run(
            ["git", "-C", str(ref), "apply", str(project / "patches" / name)], check=True
        )
    git(ref, "add", "-A")
    assert git(ref, "write-tree") == git(wt, "rev-parse", "HEAD^{tree}")
