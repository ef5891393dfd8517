"""Series other teams wrote, imported without losing a byte of their meaning.

Each series is made by the real tools (``git format-patch``, ``quilt refresh``,
GNU ``diff``) on a scratch fork (see seriesmaker.py); ``quilt push -a --fuzz=0``
and ``git apply`` of the original files are the reference trees.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from forkpatch.patchfile import upstream_refs
from support.cli import Runner
from support.git import ScratchRepo, git, tree_files
from support.projects import load, mtimes, snapshot
from support.series_styles import SeriesMaker, git_apply, quilt_push
from support.series_styles import run as run_tool

pytestmark = pytest.mark.skipif(shutil.which("quilt") is None, reason="quilt is not installed")

BACKPORT = "5a1b2c3d4e5f60718293a4b5c6d7e8f901234567"
CHERRY = "0badc0ffee0ddf00d0badc0ffee0ddf00d0badc0"
ORIGIN = "c0ffee1234567890abcdef1234567890abcdef12"


def _c_file(name: str, functions: int) -> str:
    out = [f"/* {name} */", "#include <stdio.h>", ""]
    for i in range(functions):
        out += [
            f"static int {name}_{i}(int x)",
            "{",
            f"\tint y = x + {i};",
            "\tif (y > 100)",
            "\t\treturn -1;",
            "\treturn y;",
            "}",
            "",
        ]
    return "\n".join(out) + "\n"


FILES = {
    "tools/depmod.c": _c_file("depmod", 6),
    "testsuite/run.sh": "#!/bin/sh\n" + "".join(f"run_test {i}\n" for i in range(1, 31)),
    "testsuite/slow.list": "".join(f"slow-{i}\n" for i in range(1, 11)),
    "lib/media.c": _c_file("media", 5),
    "src/auth.c": _c_file("auth", 6),
    "Makefile": "all:\n\t$(CC) -o busybox *.c\n\nclean:\n\trm -f busybox\n",
    "README": "".join(f"Line {i} of the readme.\n" for i in range(1, 21)),
}


def _fork(tmp_path) -> ScratchRepo:
    fork = ScratchRepo(tmp_path / "fork")
    for rel, text in FILES.items():
        fork.add_file(rel, text)
    fork.commit("base")
    fork.tag("v1")
    return fork


def _sub(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def _mixed_series(fork: ScratchRepo, root) -> tuple[SeriesMaker, list[tuple[str, object]]]:
    """Issue 19's series: every style in one, odd names, metadata below ---."""
    m = SeriesMaker(fork, root, "v1")
    made = []
    made.append(
        (
            "0001-depmod-Ignore-.debug-directories.patch",
            m.format_patch(
                "0001-depmod-Ignore-.debug-directories.patch",
                "depmod: Ignore .debug directories\n\nSkip the debug symbols tree.\n\n"
                "Upstream-Status: Backport [https://git.kernel.org/pub/scm/utils/kernel/kmod/"
                f"kmod.git/commit/?id={BACKPORT}]\nSigned-off-by: Jörg Entwickler "
                "<joerg@example.org>",
                {"tools/depmod.c": _sub(m.read("tools/depmod.c"), "x + 2;", "x + 2; /* .debug */")},
            ),
        )
    )
    made.append(
        (
            "0002-testsuite-fix-the-runner.patch",
            m.format_patch(
                "0002-testsuite-fix-the-runner.patch",
                "testsuite: fix the runner\n\nThe runner lost its exit code.",
                {
                    "testsuite/run.sh": _sub(
                        m.read("testsuite/run.sh"), "run_test 5\n", "run_test 5 || exit 1\n"
                    )
                },
                below_dashes="Upstream-Status: Submitted [https://lists.example.org/123]\n"
                "CVE: CVE-2024-0001\n\n",
            ),
        )
    )
    made.append(
        (
            "0003-testsuite-skip-slow-tests.patch",
            m.format_patch(
                "0003-testsuite-skip-slow-tests.patch",
                "testsuite: skip the slow tests that need a network connection and take "
                "longer than thirty seconds – über langsam\n\n"
                f"(cherry picked from commit {CHERRY})",
                {"testsuite/slow.list": m.read("testsuite/slow.list").replace("slow-3\n", "")},
                envelope=False,
                signature=False,
            ),
        )
    )
    made.append(
        (
            "fail_on_no_media.patch",
            m.quilt(
                "fail_on_no_media.patch",
                "Fail when there is no media.\n\nUpstream-Status: Pending\n",
                {
                    "lib/media.c": _sub(
                        m.read("lib/media.c"), "x + 3;", "x + 3;\n\tif (!x)\n\t\treturn -2;"
                    )
                },
            ),
        )
    )
    made.append(
        (
            "Fix_Build.DIFF",
            m.gnu_diff(
                "Fix_Build.DIFF",
                "Fix the build with make 4.4\n\nUpstream-Status: Inappropriate [configuration]\n\n",
                {
                    "Makefile": _sub(m.read("Makefile"), "*.c\n", "*.c $(EXTRA)\n"),
                    "build/extra.mk": "EXTRA = -lm\n",
                },
            ),
        )
    )
    made.append(
        (
            "CVE-2024-0002.patch",
            m.quilt(
                "CVE-2024-0002.patch",
                "Description: Check the length before copying\n This fixes an overflow.\n"
                f"Origin: upstream, https://github.com/example/busybox/commit/{ORIGIN}\n"
                "Bug: https://bugs.example.org/4242\nForwarded: not-needed\n"
                "Last-Update: 2024-09-03\n---\n",
                {
                    "src/auth.c": _sub(
                        m.read("src/auth.c"), "x + 4;", "x + 4;\n\tif (x < 0)\n\t\treturn -3;"
                    )
                },
                refresh=("-p", "ab", "--no-timestamps", "--diffstat"),
                diff_opts="-p",
            ),
        )
    )
    made.append(
        (
            "extra/readme.patch",
            m.format_patch(
                "extra/readme.patch",
                "README: fix a typo",
                {"README": _sub(m.read("README"), "Line 7 of", "Line seven of")},
                numbered=True,
            ),
        )
    )
    return m, made


def _project(tmp_path, capsys, fork, name="project"):
    project = tmp_path / name
    project.mkdir()
    run = Runner(project, capsys)
    run("init", "--fork-url", str(fork.path), "--base", "v1")
    return project, run


# Slugs of the file names (format-patch's number dropped); the files keep their names.
MIXED_NAMES = [
    "depmod-ignore-.debug-directories",
    "testsuite-fix-the-runner",
    "testsuite-skip-slow-tests",
    "fail_on_no_media",
    "fix_build",
    "cve-2024-0002",
    "readme",
]


def test_mixed_series_from_a_recipe_list_is_kept_byte_for_byte(tmp_path, capsys):
    fork = _fork(tmp_path)
    m, made = _mixed_series(fork, tmp_path / "make")
    # No series file: the build recipe lists the patches.
    recipe = tmp_path / "recipe.list"
    recipe.write_text("".join(f"{rel}\n" for rel, _ in made))
    project, run = _project(tmp_path, capsys, fork)
    before = snapshot(project)
    _, _, err = run("import", "--quilt", str(m.out), expect=2)
    assert "no 'series' file" in err and "--series" in err
    assert snapshot(project) == before
    run("import", "--quilt", str(m.out), "--series", str(recipe))

    series = load(project)
    assert series.names() == MIXED_NAMES
    assert [p.file for p in series.patches] == [rel for rel, _ in made]
    summaries = [p.summary for p in series.patches]
    assert summaries[:2] == ["depmod: Ignore .debug directories", "testsuite: fix the runner"]
    assert summaries[2] == (
        "testsuite: skip the slow tests that need a network connection and take longer "
        "than thirty seconds – über langsam"
    )
    assert summaries[3:] == [
        "Fail when there is no media.",
        "Fix the build with make 4.4",
        "Check the length before copying",
        "README: fix a typo",
    ]
    files = snapshot(project)
    for rel, path in made:
        assert files[f"patches/{rel}"] == path.read_bytes(), rel

    # Metadata in series.yaml; the files keep theirs.
    by = {p.name: p for p in series.patches}
    assert by["depmod-ignore-.debug-directories"].upstream.startswith("Upstream-Status: Backport [")
    assert by["depmod-ignore-.debug-directories"].upstream_commits[-1] == BACKPORT
    assert by["testsuite-fix-the-runner"].upstream == (
        "Upstream-Status: Submitted [https://lists.example.org/123]"
    )
    assert CHERRY in by[MIXED_NAMES[2]].upstream_commits
    assert by["fix_build"].upstream == "Upstream-Status: Inappropriate [configuration]"
    cve = by["cve-2024-0002"]
    assert cve.origin == f"upstream, https://github.com/example/busybox/commit/{ORIGIN}"
    assert cve.upstream == "Forwarded: not-needed; Bug: https://bugs.example.org/4242"
    assert upstream_refs(cve) == [ORIGIN]
    assert BACKPORT in upstream_refs(by["depmod-ignore-.debug-directories"])

    # The applied tree is what quilt and git apply make of the same files.
    reference = quilt_push(fork.path, "v1", made, tmp_path / "quilt")
    assert reference == git_apply(fork.path, "v1", [p for _, p in made], tmp_path / "git")
    run("apply")
    wt = project / ".forkpatch" / "worktree"
    assert tree_files(wt) == reference
    log = git(wt, "log", "--format=%s", "v1..HEAD")
    assert "depmod-ignore-.debug-directories: depmod: Ignore .debug directories" in log
    # Import -> apply -> export changes nothing.
    m1 = mtimes(project)
    run("export")
    assert snapshot(project) == files and mtimes(project) == m1
    # And a second apply finds nothing unsaved (the files still describe the commits).
    run("apply")


def test_explicit_files_keep_their_names_in_the_order_given(tmp_path, capsys):
    fork = _fork(tmp_path)
    _m, made = _mixed_series(fork, tmp_path / "make")
    project, run = _project(tmp_path, capsys, fork)
    paths = [p for _, p in made]
    run("import", *map(str, paths))
    series = load(project)
    assert series.names() == MIXED_NAMES
    # A file's own name, without the directory it came from.
    assert [p.file for p in series.patches] == [p.name for p in paths]
    for p in paths:
        assert (project / "patches" / p.name).read_bytes() == p.read_bytes()

    # Two files of the same name (from two directories) are refused, naming both ways out.
    other = tmp_path / "other"
    other.mkdir()
    (other / "README.patch").write_text("--- /dev/null\n+++ b/NEW1\n@@ -0,0 +1 @@\n+1\n")
    (tmp_path / "README.patch").write_text("--- /dev/null\n+++ b/NEW2\n@@ -0,0 +1 @@\n+2\n")
    before = snapshot(project)
    _, _, err = run("import", str(other / "README.patch"), str(tmp_path / "README.patch"), expect=2)
    assert "patches/README.patch" in err and "--rename" in err
    assert snapshot(project) == before
    # Re-importing a file already in the series: refused too.
    _, _, err = run("import", str(paths[3]), expect=2)
    assert "fail_on_no_media.patch" in err and "already the file of patch 'fail_on_no_media'" in err
    # --rename: both stored as <name>.patch, names made unique ("readme" and its
    # file readme.patch are extra/readme.patch's).
    run("import", "--rename", str(other / "README.patch"), str(tmp_path / "README.patch"))
    series = load(project)
    assert series.names()[-2:] == ["readme-2", "readme-3"]
    assert [p.file for p in series.patches][-2:] == ["readme-2.patch", "readme-3.patch"]


@pytest.mark.parametrize(
    "subjects",
    [
        # Two patches of one subsystem, and one the same as the first.
        ["testsuite: fix a", "testsuite: fix b", "testsuite: fix a"],
        # A subject that looks like forkpatch's "name: summary", tags of every kind.
        ["[PATCH v3 2/7] depmod: x", "[RFC PATCH net-next] net: y", "[2/2] depmod: x"],
        # Uppercase and numbers in the subsystem.
        ["USB: Core: z", "ext4: w", "Ext4: w"],
    ],
)
def test_kernel_subjects_are_summaries_whole(tmp_path, capsys, subjects):
    fork = _fork(tmp_path)
    m = SeriesMaker(fork, tmp_path / "make", "v1")
    paths = []
    for i, subject in enumerate(subjects):
        text = m.read("README").replace(f"Line {i + 1} ", f"Line {i + 1}! ")
        summary = subject.split("] ")[-1]
        # Named as git format-patch names them.
        file = f"{i + 1:04d}-" + re.sub(r"[^A-Za-z0-9._]+", "-", summary).strip("-") + ".patch"
        path = m.format_patch(file, summary, {"README": text})
        if subject.startswith("["):  # the tags as another tool wrote them
            data = path.read_text()
            line = next(ln for ln in data.splitlines() if ln.startswith("Subject: "))
            path.write_text(data.replace(line, f"Subject: {subject}"))
        paths.append(path)
    project, run = _project(tmp_path, capsys, fork)
    run("import", *map(str, paths))
    series = load(project)
    want = [s.split("] ")[-1] for s in subjects]
    assert [p.summary for p in series.patches] == want
    assert len(set(series.names())) == len(subjects)
    for name, summary in zip(series.names(), want, strict=True):
        assert name.startswith(summary.split(":")[0].lower().replace(" ", "-")), (name, summary)
    run("apply")
    run("export")
    for p in paths:
        assert (project / "patches" / p.name).read_bytes() == p.read_bytes()


def test_forkpatch_own_mails_are_read_as_name_and_summary(tmp_path, capsys):
    fork = _fork(tmp_path)
    m = SeriesMaker(fork, tmp_path / "make", "v1")
    own = m.format_patch(
        "0001-readme-fix-Line-one.patch",
        "readme-fix: Line one\n\nWhy.\n\nForkpatch-Patch: readme-fix",
        {"README": m.read("README").replace("Line 1 ", "Line one ")},
    )
    third = m.format_patch(
        "0002-readme-fix-Line-two.patch",
        "readme-fix: Line two\n\nA kernel-style subject of another team.",
        {"README": m.read("README").replace("Line 2 ", "Line two ")},
    )
    project, run = _project(tmp_path, capsys, fork)
    run("import", str(own), str(third))
    series = load(project)
    assert series.names() == ["readme-fix", "readme-fix-line-two"]
    assert [p.summary for p in series.patches] == ["Line one", "readme-fix: Line two"]
    # forkpatch's own mail comes home in forkpatch's own form; the other keeps its bytes.
    assert [p.file for p in series.patches] == ["readme-fix.patch", third.name]
    text = (project / "patches" / "readme-fix.patch").read_text()
    assert text.startswith("Why.\n\ndiff --git a/README b/README\n")
    assert "Forkpatch-Patch" not in text and "From:" not in text
    assert (project / "patches" / third.name).read_bytes() == third.read_bytes()
    assert series.get("readme-fix").upstream_commits == ()  # its From id is a local commit


def _patch_files(project) -> list[tuple[str, object]]:
    series = load(project)
    return [(p.file, project / "patches" / p.file) for p in series.patches if p.file]


def test_edit_in_the_middle_rewrites_only_that_file_in_its_own_style(tmp_path, capsys):
    fork = _fork(tmp_path)
    m, made = _mixed_series(fork, tmp_path / "make")
    (m.out / "series").write_text("".join(f"{rel}\n" for rel, _ in made))
    project, run = _project(tmp_path, capsys, fork)
    run("import", "--quilt", str(m.out))
    run("apply")
    wt = project / ".forkpatch" / "worktree"
    before = snapshot(project)

    # A mail-form patch: one more line in the same hunk region.
    run("edit", "testsuite-fix-the-runner")
    run_sh = wt / "testsuite/run.sh"
    run_sh.write_text(run_sh.read_text().replace("run_test 6\n", "run_test 6 || exit 1\n"))
    run("refresh")
    # A quilt-form patch: another hunk.
    run("edit", "fail_on_no_media")
    media = wt / "lib/media.c"
    media.write_text(media.read_text().replace("x + 0;", "x + 0; /* zero */"))
    run("refresh")
    run("export")
    after = snapshot(project)
    changed = {k for k in after if after[k] != before[k]}
    assert changed == {
        "patches/0002-testsuite-fix-the-runner.patch",
        "patches/fail_on_no_media.patch",
    }

    mail = after["patches/0002-testsuite-fix-the-runner.patch"].decode()
    old_mail = before["patches/0002-testsuite-fix-the-runner.patch"].decode()
    head, _, _ = old_mail.partition("\n---\n")
    assert mail.startswith(head + "\n---\nUpstream-Status: Submitted")  # headers, body kept
    assert "CVE: CVE-2024-0001\n" in mail
    assert mail.endswith(old_mail[old_mail.rindex("\n-- \n") :])  # the signature too
    # The diffstat says what the diff does now (as git format-patch would write it).
    parent = git(wt, "log", "--format=%H", "-1", "--grep=testsuite: fix the runner")
    stat = run_tool(wt, "git", "diff-tree", "--stat=72", "--summary", f"{parent}^", parent)
    notes = "CVE: CVE-2024-0001\n\n"
    assert notes + stat.decode() + "\ndiff --git" in mail
    assert b"2 insertions(+), 2 deletions(-)" in stat
    assert "1 insertion(+), 1 deletion(-)" in old_mail and "1 insertion(+)" not in mail
    assert "run_test 6 || exit 1" in mail

    quilt_text = after["patches/fail_on_no_media.patch"].decode()
    old_quilt = before["patches/fail_on_no_media.patch"].decode()
    assert quilt_text.startswith("Fail when there is no media.\n\nUpstream-Status: Pending\n")
    assert "Index: busybox-1.36/lib/media.c\n" + "=" * 67 + "\n" in quilt_text
    old_names = [ln for ln in old_quilt.splitlines() if ln.startswith(("--- ", "+++ "))]
    assert [ln for ln in quilt_text.splitlines() if ln.startswith(("--- ", "+++ "))] == old_names
    assert "diff --git" not in quilt_text and "/* zero */" in quilt_text

    # The exported series still applies with quilt (no fuzz) and git apply, to the same tree.
    files = _patch_files(project)
    assert quilt_push(fork.path, "v1", files, tmp_path / "quilt") == tree_files(wt)
    assert git_apply(fork.path, "v1", [p for _, p in files], tmp_path / "git") == tree_files(wt)
    # And it is a fixed point.
    m2 = mtimes(project)
    run("export")
    assert snapshot(project) == after and mtimes(project) == m2


def _dep3_series(fork: ScratchRepo, root):
    """Issue 14's series: gbp-pq-shaped format-patch files with DEP-3 fields and a
    diffstat, listed by a quilt series file, one of them big."""
    m = SeriesMaker(fork, root, "v1", pkg="openssh-9.7")
    made = []
    big = _sub(
        m.read("src/auth.c"), "x + 1;\n", "x + 1;\n" + "".join(f"\t/* {i} */\n" for i in range(80))
    )
    made.append(
        (
            "restore-authorized_keys2.patch",
            m.format_patch(
                "restore-authorized_keys2.patch",
                "Restore reading authorized_keys2 by default\n\n"
                "Upstream seems to intend to gradually phase this out.\n\n"
                "Origin: vendor, https://bugs.debian.org/852320\n"
                "Bug-Debian: https://bugs.debian.org/852320\n"
                "Forwarded: not-needed\nLast-Update: 2017-10-04\n\n"
                "Patch-Name: restore-authorized_keys2.patch",
                {"src/auth.c": big},
            ),
        )
    )
    made.append(
        (
            "gssapi.patch",
            m.format_patch(
                "gssapi.patch",
                "GSSAPI key exchange support\n\n"
                f"Origin: upstream, https://github.com/example/openssh/commit/{ORIGIN[:12]}\n"
                "Applied-Upstream: 9.8, https://github.com/example/openssh/commit/"
                f"{ORIGIN[:12]}\nBug: https://bugzilla.mindrot.org/show_bug.cgi?id=1242\n"
                "Last-Update: 2024-07-01\n\nPatch-Name: gssapi.patch",
                {"lib/media.c": _sub(m.read("lib/media.c"), "x + 2;", "x + 2; /* gss */")},
            ),
        )
    )
    made.append(
        (
            "debian-banner.patch",
            m.format_patch(
                "debian-banner.patch",
                "Add DebianBanner server configuration option\n\n"
                "Forwarded: not-needed\nLast-Update: 2020-02-21\n\n"
                "Patch-Name: debian-banner.patch",
                {
                    "README": _sub(m.read("README"), "Line 3 of", "Line three of"),
                    "testsuite/run.sh": _sub(m.read("testsuite/run.sh"), "run_test 9\n", ""),
                },
            ),
        )
    )
    (m.out / "series").write_text("".join(f"{rel}\n" for rel, _ in made))
    return m, made


def test_dep3_format_patch_series_with_diffstats(tmp_path, capsys):
    fork = _fork(tmp_path)
    m, made = _dep3_series(fork, tmp_path / "make")
    project, run = _project(tmp_path, capsys, fork)
    run("import", "--quilt", str(m.out))
    series = load(project)
    # The summary is the Subject, never the mbox "From <id> Mon Sep 17 ..." line.
    assert [p.summary for p in series.patches] == [
        "Restore reading authorized_keys2 by default",
        "GSSAPI key exchange support",
        "Add DebianBanner server configuration option",
    ]
    assert [p.file for p in series.patches] == [rel for rel, _ in made]
    assert series.names() == ["restore-authorized_keys2", "gssapi", "debian-banner"]
    first, gss, banner = series.patches
    assert first.origin == "vendor, https://bugs.debian.org/852320"
    assert first.upstream == "Forwarded: not-needed; Bug-Debian: https://bugs.debian.org/852320"
    assert gss.origin.startswith("upstream, https://github.com/example/openssh/commit/")
    assert gss.upstream.startswith("Applied-Upstream: 9.8, https://")
    assert upstream_refs(gss)[-1] == ORIGIN[:12]
    assert banner.upstream == "Forwarded: not-needed"
    assert "upstream-commits:" in (project / "series.yaml").read_text()
    before = snapshot(project)
    for rel, path in made:
        assert before[f"patches/{rel}"] == path.read_bytes()
    # Work-tree commits carry the subject and the body, not the mail envelope.
    run("apply")
    wt = project / ".forkpatch" / "worktree"
    subjects = git(wt, "log", "--reverse", "--format=%s", "v1..HEAD").splitlines()
    assert subjects[0] == ("restore-authorized_keys2: Restore reading authorized_keys2 by default")
    assert tree_files(wt) == quilt_push(fork.path, "v1", made, tmp_path / "quilt")
    run("export")
    assert snapshot(project) == before

    # The maintainers change the big patch by hand; its diffstat follows, nothing else moves.
    run("edit", "restore-authorized_keys2")
    auth = wt / "src/auth.c"
    auth.write_text(auth.read_text().replace("\t/* 79 */\n", ""))
    run("refresh")
    after = snapshot(project)
    assert {k for k in after if after[k] != before[k]} == {"patches/restore-authorized_keys2.patch"}
    text = after["patches/restore-authorized_keys2.patch"].decode()
    assert (
        " 1 file changed, 80 insertions(+)\n"
        in before["patches/restore-authorized_keys2.patch"].decode()
    )
    assert " 1 file changed, 79 insertions(+)\n" in text and "80 insertions" not in text
    assert "Origin: vendor, https://bugs.debian.org/852320" in text
    assert load(project).get("restore-authorized_keys2").origin == first.origin
    files = _patch_files(project)
    assert quilt_push(fork.path, "v1", files, tmp_path / "quilt2") == tree_files(wt)
    assert git_apply(fork.path, "v1", [p for _, p in files], tmp_path / "git2") == tree_files(wt)


def _before_diff(data: bytes) -> bytes:
    return re.split(rb"^(?:diff |Index: |--- )", data, maxsplit=1, flags=re.M)[0]


def test_rebase_keeps_each_file_in_its_own_form(tmp_path, capsys):
    fork = _fork(tmp_path)
    _m, made = _mixed_series(fork, tmp_path / "make")
    # Upstream v2 adds lines at the top of every file: every patch applies with an offset.
    for rel, text in FILES.items():
        fork.add_file(rel, ("/* v2 */\n" if rel.endswith(".c") else "# v2\n") * 3 + text)
    fork.commit("upstream: headers")
    fork.tag("v2")
    project, run = _project(tmp_path, capsys, fork)
    run("import", *(str(p) for _, p in made))
    before = snapshot(project)
    meta = [(p.origin, p.upstream, p.upstream_commits) for p in load(project).patches]
    _, out, _ = run("rebase", "--onto", "v2", "--json")
    statuses = {p["name"]: p["status"] for p in json.loads(out)["patches"]}
    # A hunk at the top of a file has no context above it: it is merged, not moved.
    assert statuses.pop("testsuite-skip-slow-tests") == statuses.pop("fix_build") == "merged"
    assert set(statuses.values()) == {"offset"}, statuses
    after = snapshot(project)
    series = load(project)
    assert series.base.tag == "v2"
    # The metadata import mapped survives the rebase, in series.yaml and in the files.
    assert [(p.origin, p.upstream, p.upstream_commits) for p in series.patches] == meta
    for entry in series.patches:
        old, new = before[f"patches/{entry.file}"], after[f"patches/{entry.file}"]
        assert old != new
        if entry.name in statuses:  # offset
            # Only hunk headers (and the blob ids of `index` lines) moved: every other
            # line, mail headers, notes, Index: lines, .orig names, signatures, stayed.
            keep = (b"@@", b"index ")
            old_lines = [ln for ln in old.splitlines() if not ln.startswith(keep)]
            assert old_lines == [ln for ln in new.splitlines() if not ln.startswith(keep)]
        else:  # merged: the hunks changed, not the text around them
            assert _before_diff(old) == _before_diff(new) and b"diff --git" not in (
                new if entry.name == "fix_build" else b""
            )
    files = [(p.name, project / "patches" / p.name) for _, p in made]
    quilt_tree = quilt_push(fork.path, "v2", files, tmp_path / "quilt")
    assert quilt_tree == git_apply(fork.path, "v2", [p for _, p in files], tmp_path / "git")
    run("apply")
    assert tree_files(project / ".forkpatch" / "worktree") == quilt_tree


def test_a_second_work_tree_is_refused_naming_the_first(tmp_path, capsys):
    fork = _fork(tmp_path)
    project, run = _project(tmp_path, capsys, fork)
    (tmp_path / "a.diff").write_text(
        "--- a/README\n+++ b/README\n@@ -1,2 +1,2 @@\n-Line 1 of the readme.\n+Line one.\n"
        " Line 2 of the readme.\n"
    )
    run("import", str(tmp_path / "a.diff"))
    first = tmp_path / "wt1"
    run("apply", "--worktree", str(first))
    state = (project / ".forkpatch" / "state.json").read_text()
    for second in (tmp_path / "wt2", project / ".forkpatch" / "worktree"):
        _, _, err = run("apply", "--worktree", str(second), expect=2)
        assert f"already has a work tree at {first.resolve()}" in err
        assert "cannot force update" not in err and not second.exists()
        assert (project / ".forkpatch" / "state.json").read_text() == state
    # Without state.json's record (deleted by hand) git's registration still names it.
    (project / ".forkpatch" / "state.json").unlink()
    _, _, err = run("apply", "--worktree", str(tmp_path / "wt3"), expect=2)
    assert str(first.resolve()) in err
    # The same work tree again is fine; once it is gone, another may be made.
    run("apply", "--worktree", str(first))
    shutil.rmtree(first)
    run("apply", "--worktree", str(tmp_path / "wt2"))
    assert (tmp_path / "wt2" / "README").read_text().startswith("Line one.\n")
    subprocess.run(["git", "-C", str(tmp_path / "wt2"), "status"], check=True, capture_output=True)


def _amend(wt, name: str, subject: str, body: str) -> None:
    git(
        wt,
        "commit",
        "-q",
        "--amend",
        "-m",
        f"{name}: {subject}\n\n{body}\n\nForkpatch-Patch: {name}",
    )


def test_commit_message_edits_go_back_into_the_file_in_place(tmp_path, capsys):
    fork = _fork(tmp_path)
    _m, made = _mixed_series(fork, tmp_path / "make")
    project, run = _project(tmp_path, capsys, fork)
    run("import", *(str(p) for _, p in made))
    run("apply")
    wt = project / ".forkpatch" / "worktree"
    before = snapshot(project)
    # A mail: a new summary goes to its Subject (tags kept), a new body to the body.
    run("edit", "testsuite-fix-the-runner")
    _amend(wt, "testsuite-fix-the-runner", "testsuite: keep the exit code", "Reworded.")
    run("refresh")
    # A quilt patch: its description is the free text above the diff.
    run("edit", "fail_on_no_media")
    _amend(wt, "fail_on_no_media", "Fail without media", "Fail without media, loudly.")
    run("refresh")
    after = snapshot(project)
    assert {k for k in after if after[k] != before[k]} == {
        "series.yaml",
        "patches/0002-testsuite-fix-the-runner.patch",
        "patches/fail_on_no_media.patch",
    }
    old = before["patches/0002-testsuite-fix-the-runner.patch"].decode()
    new = after["patches/0002-testsuite-fix-the-runner.patch"].decode()
    assert new == old.replace(
        "Subject: [PATCH] testsuite: fix the runner",
        "Subject: [PATCH] testsuite: keep the exit code",
    ).replace("The runner lost its exit code.", "Reworded.")
    old_q = before["patches/fail_on_no_media.patch"].decode()
    assert after["patches/fail_on_no_media.patch"].decode() == old_q.replace(
        "Fail when there is no media.\n\nUpstream-Status: Pending", "Fail without media, loudly."
    )
    series = load(project)
    assert series.get("testsuite-fix-the-runner").summary == "testsuite: keep the exit code"
    assert series.get("fail_on_no_media").summary == "Fail without media"
    run("export")
    assert snapshot(project) == after


def test_mbox_of_several_mails_and_encoded_mails(tmp_path, capsys):
    fork = _fork(tmp_path)
    m = SeriesMaker(fork, tmp_path / "make", "v1")
    mails = [
        m.format_patch(
            f"{i}.patch",
            f"readme: change line {i}",
            {"README": m.read("README").replace(f"Line {i} ", f"Line {i}. ")},
        )
        for i in (1, 2, 3)
    ]
    mbox = tmp_path / "three.mbox"
    mbox.write_bytes(b"".join(p.read_bytes() for p in mails))
    # The same mail as a mailer sends it: quoted-printable body.
    qp = m.format_patch(
        "qp.patch",
        "readme: change line 5 – ü",
        {"README": m.read("README").replace("5 of", "5 öf")},
    )
    raw = qp.read_bytes()
    head, _, body = raw.partition(b"\n\n")
    import quopri

    encoded = (
        head.replace(
            b"Content-Transfer-Encoding: 8bit", b"Content-Transfer-Encoding: quoted-printable"
        )
        + b"\n\n"
        + quopri.encodestring(body)
    )
    assert encoded != raw and b"=C3=B6" in encoded
    qp.write_bytes(encoded)
    # A mail in ISO-8859-1 (description and file content), as old mailers wrote them.
    latin = m.format_patch(
        "latin.patch",
        "readme: line 6 – done\n\nMüller's fix.",
        {"README": m.read("README").encode().replace(b"6 of", b"6 \xf6f")},
    )
    text8 = latin.read_bytes()
    cut = text8.index(b"\ndiff --git ")
    head8 = text8[:cut].replace(b"charset=UTF-8", b"charset=ISO-8859-1")
    latin.write_bytes(head8.decode("utf-8").encode("latin-1") + text8[cut:])
    project, run = _project(tmp_path, capsys, fork)
    run("import", str(mbox), str(qp), str(latin))
    series = load(project)
    assert series.names() == [
        "readme-change-line-1",
        "readme-change-line-2",
        "readme-change-line-3",
        "qp",
        "latin",
    ]
    assert series.get("latin").summary == "readme: line 6 – done"  # RFC 2047 in UTF-8
    stored = (project / "patches" / "latin.patch").read_bytes()
    assert stored.startswith("Müller's fix.\n\ndiff --git".encode())
    assert b"+Line 6 \xf6f the readme." in stored  # the file's own bytes, not recoded
    # Each mail of the mbox byte for byte, named after its subject.
    for entry, mail in zip(series.patches[:3], mails, strict=True):
        assert entry.file == f"{entry.name}.patch"
        assert (project / "patches" / entry.file).read_bytes() == mail.read_bytes()
    # The encoded mail is decoded: its bytes are not a diff. Stored in forkpatch's form.
    assert series.patches[3].summary == "readme: change line 5 – ü"
    assert series.patches[3].file == "qp.patch"
    text = (project / "patches" / "qp.patch").read_text()
    assert text.startswith("diff --git a/README b/README\n") and "5 öf" in text
    run("apply")
    readme = (project / ".forkpatch" / "worktree" / "README").read_bytes()
    assert "Line 5 öf".encode() in readme and b"Line 6 \xf6f" in readme


@pytest.mark.parametrize("first", ["plain", "git"])
def test_export_sees_a_file_taken_out_of_a_patch_by_hand(tmp_path, capsys, first):
    """A diff that no longer describes its commit is rewritten, whatever its sections."""
    fork = _fork(tmp_path)
    project, run = _project(tmp_path, capsys, fork)
    plain = (
        "Index: busybox-1.36/README\n" + "=" * 67 + "\n"
        "--- busybox-1.36.orig/README\n+++ busybox-1.36/README\n"
        "@@ -1,3 +1,3 @@\n-Line 1 of the readme.\n+Line one of the readme.\n"
        " Line 2 of the readme.\n Line 3 of the readme.\n"
    )
    git_section = (
        "diff --git a/Makefile b/Makefile\n--- a/Makefile\n+++ b/Makefile\n"
        # Exactly git's own section for the change, as git diff prints it.
        "@@ -1,5 +1,5 @@\n all:\n-\t$(CC) -o busybox *.c\n+\t$(CC) -O2 -o busybox *.c\n \n"
        " clean:\n \trm -f busybox\n"
    )
    body = plain + git_section if first == "plain" else git_section + plain
    (tmp_path / "two.patch").write_text("Two files.\n\n" + body + "-- \n2.39.5\n\n")
    run("import", str(tmp_path / "two.patch"))
    run("apply")
    wt = project / ".forkpatch" / "worktree"
    (wt / "README").write_text(FILES["README"])  # take the README change out again
    git(wt, "commit", "-q", "-a", "--amend", "--no-edit")
    run("export")
    text = (project / "patches" / "two.patch").read_text()
    assert "README" not in text and "-O2" in text
    assert text.startswith("Two files.\n\n") and text.endswith("-- \n2.39.5\n\n")


def test_a_directory_without_series_file_imports_in_name_order_on_request(tmp_path, capsys):
    fork = _fork(tmp_path)
    m, made = _mixed_series(fork, tmp_path / "make")
    (m.out / "NOTES").write_text("how we make these patches\n")
    project, run = _project(tmp_path, capsys, fork)
    before = snapshot(project)
    # Without a series file: refused, and the tip names the option.
    _, _, err = run("import", "--quilt", str(m.out), expect=2)
    assert "no 'series' file" in err and "--name-order" in err
    # A directory given as a file: the tip is --quilt.
    _, _, err = run("import", str(m.out), expect=2)
    assert "is a directory" in err and f"forkpatch import --quilt {m.out}" in err
    _, _, err = run("import", "--name-order", str(made[0][1]), expect=2)
    assert "--name-order goes with --quilt DIR" in err
    _, _, err = run("import", "--quilt", str(m.out), "--name-order", "--series", "x", expect=2)
    assert "--name-order and --series" in err
    assert snapshot(project) == before
    _, _, err = run("import", "--quilt", str(m.out), "--name-order")
    assert "skipped: NOTES" in err
    # Every *.patch / *.diff file directly in DIR, in the byte order of the names
    # (digits, then upper case, then lower case); extra/ is a directory.
    top = sorted(rel for rel, _ in made if "/" not in rel)
    assert top[3:] == ["CVE-2024-0002.patch", "Fix_Build.DIFF", "fail_on_no_media.patch"]
    series = load(project)
    assert [p.file for p in series.patches] == top
    files = snapshot(project)
    for rel in top:
        assert files[f"patches/{rel}"] == (m.out / rel).read_bytes()
    reference = quilt_push(fork.path, "v1", [(rel, m.out / rel) for rel in top], tmp_path / "q")
    run("apply")
    assert tree_files(project / ".forkpatch" / "worktree") == reference


def test_name_order_is_the_byte_order_of_the_names(tmp_path, capsys):
    fork = _fork(tmp_path)
    m = SeriesMaker(fork, tmp_path / "make", "v1")
    # 10- sorts before 9- (as `LC_ALL=C ls` and the build systems that apply patches/
    # without a series file have it); the second patch edits the first one's line.
    m.format_patch("10-first.patch", "first", {"README": _sub(m.read("README"), "Line 4 ", "L4 ")})
    m.format_patch("9-second.patch", "second", {"README": _sub(m.read("README"), "L4 ", "LL4 ")})
    project, run = _project(tmp_path, capsys, fork)
    run("import", "--quilt", str(m.out), "--name-order")
    assert [p.file for p in load(project).patches] == ["10-first.patch", "9-second.patch"]
    run("apply")
    assert "LL4 of the readme." in (project / ".forkpatch/worktree/README").read_text()


def _backport_file(m: SeriesMaker) -> tuple[object, list[str]]:
    """An upstream series of three commits as one file of `git format-patch --stdout`
    mails (a team's backport, applied by quilt as one patch); the first and the last
    change the same file."""
    commits = []
    text = {rel: m.read(rel) for rel in ("tools/depmod.c", "README")}
    for subject, rel, old, new in (
        ("depmod: skip .debug", "tools/depmod.c", "x + 1;", "x + 1; /* .debug */"),
        ("readme: line four", "README", "Line 4 of", "Line four of"),
        ("depmod: check y", "tools/depmod.c", "x + 5;", "x + 5;\n\tif (!y)\n\t\treturn 0;"),
    ):
        text[rel] = _sub(text[rel], old, new)
        commits.append((f"{subject}\n\nUpstream change {subject}.", {rel: text[rel]}))
    return m.format_patch_series("0001-backport-depmod-fixes.patch", commits)


def test_one_file_of_several_mails_is_one_patch_in_a_quilt_series(tmp_path, capsys):
    fork = _fork(tmp_path)
    m = SeriesMaker(fork, tmp_path / "make", "v1")
    backport, ids = _backport_file(m)
    media = m.quilt(
        "media.patch",
        "Media check.\n",
        {"lib/media.c": _sub(m.read("lib/media.c"), "x + 3;", "x + 3; /* m */")},
    )
    made = [(backport.name, backport), ("media.patch", media)]
    (m.out / "series").write_text("".join(f"{rel}\n" for rel, _ in made))
    project, run = _project(tmp_path, capsys, fork)
    run("import", "--quilt", str(m.out))
    series = load(project)
    assert series.names() == ["backport-depmod-fixes", "media"]
    entry = series.get("backport-depmod-fixes")
    assert entry.file == backport.name and entry.summary == "depmod: skip .debug"
    # Its upstream evidence: the commit every mail names.
    assert list(entry.upstream_commits) == ids
    before = snapshot(project)
    assert before[f"patches/{backport.name}"] == backport.read_bytes()
    # Applied as quilt applies it: every mail's diff, in order.
    reference = quilt_push(fork.path, "v1", made, tmp_path / "quilt")
    run("apply")
    wt = project / ".forkpatch" / "worktree"
    assert tree_files(wt) == reference
    m1 = mtimes(project)
    run("export")
    assert snapshot(project) == before and mtimes(project) == m1

    # An edit goes into the last mail (in its style, its diffstat following); the
    # mails before it stay byte for byte.
    run("edit", "backport-depmod-fixes")
    depmod = wt / "tools/depmod.c"
    depmod.write_text(depmod.read_text().replace("x + 4;", "x + 4; /* four */"))
    run("refresh")
    old, new = backport.read_bytes(), (project / "patches" / backport.name).read_bytes()
    last = old.rindex(b"\nFrom ") + 1
    assert new[:last] == old[:last]
    assert b"/* four */" in new[last:] and b"Subject: [PATCH 3/3] depmod: check y" in new[last:]
    assert (
        b" tools/depmod.c | 4 +++-\n 1 file changed, 3 insertions(+), 1 deletion(-)\n"
        in (new[last:])
    )
    files = _patch_files(project)
    assert quilt_push(fork.path, "v1", files, tmp_path / "quilt2") == tree_files(wt)
    assert git_apply(fork.path, "v1", [p for _, p in files], tmp_path / "git2") == tree_files(wt)
    after = snapshot(project)
    run("export")
    assert snapshot(project) == after


def test_the_same_file_named_on_the_command_line_is_split_as_git_am_does(tmp_path, capsys):
    fork = _fork(tmp_path)
    m = SeriesMaker(fork, tmp_path / "make", "v1")
    backport, ids = _backport_file(m)
    project, run = _project(tmp_path, capsys, fork)
    run("import", str(backport))
    series = load(project)
    assert series.names() == ["depmod-skip-debug", "readme-line-four", "depmod-check-y"]
    assert [p.upstream_commits[-1] for p in series.patches] == ids


def _long_names(functions: int) -> str:
    """C with function names longer than GNU diff's 40-character cut."""
    out = ["/* long */", "#include <stdio.h>", ""]
    for i in range(functions):
        out += [
            f"static int media_layer_negotiate_the_buffer_geometry_{i}(int x)",
            "{",
            f"\tint y = x + {i};",
            "\tif (y > 100)",
            "\t\treturn -1;",
            "\treturn y;",
            "}",
            "",
        ]
    return "\n".join(out) + "\n"


QUILT_STYLES = {
    # quilt refresh options, QUILT_DIFF_OPTS
    "defaults -p": ((), "-p"),
    "no-timestamps no-index -p ab, -p": (("--no-timestamps", "--no-index", "-p", "ab"), "-p"),
    "-U 1 no-timestamps": (("-U", "1", "--no-timestamps"), ""),
    "-U 5 -p ab, -p": (("-U", "5", "-p", "ab", "--no-timestamps"), "-p"),
    "diffstat no-timestamps": (("--diffstat", "--no-timestamps"), ""),
}


def _sections(data: bytes) -> set[bytes]:
    """The file sections of a quilt patch (header aside), each as bytes."""
    body = re.split(rb"(?m)^(?=Index: |--- )", data)
    return {s for s in body[1:]}


@pytest.mark.parametrize("style", sorted(QUILT_STYLES))
def test_a_refresh_writes_what_quilt_refresh_writes(tmp_path, capsys, style):
    """The rewritten hunks and a newly touched file follow the file's quilt style:
    function names cut at 40 characters, its context width, its header lines. The
    reference is `quilt refresh` with the same options on the same change."""
    refresh, diff_opts = QUILT_STYLES[style]
    fork = ScratchRepo(tmp_path / "fork")
    for rel, text in {**FILES, "lib/long.c": _long_names(6)}.items():
        fork.add_file(rel, text)
    fork.commit("base")
    fork.tag("v1")
    first = _sub(_long_names(6), "x + 1;", "x + 1; /* one */")
    both = _sub(first, "x + 4;", "x + 4; /* four */")
    readme = _sub(FILES["README"], "Line 9 of", "Line nine of")
    header = "Negotiate the geometry.\n"
    m = SeriesMaker(fork, tmp_path / "make", "v1")
    made = m.quilt(
        "geometry.patch", header, {"lib/long.c": first}, refresh=refresh, diff_opts=diff_opts
    )
    # What quilt itself writes for the patch once it has the second hunk, README, a new
    # file and a deleted one.
    ref = SeriesMaker(fork, tmp_path / "ref", "v1")
    wanted = ref.quilt(
        "geometry.patch",
        header,
        {"lib/long.c": both, "README": readme, "lib/new.h": "#define NEW 1\n", "Makefile": None},
        refresh=refresh,
        diff_opts=diff_opts,
    ).read_bytes()
    texts = re.findall(rb"(?m)^@@ [^@]+ @@ (.+)$", wanted)
    assert (diff_opts == "-p") == any(len(t) == 40 for t in texts)  # GNU diff's cut
    (m.out / "series").write_text("geometry.patch\n")
    project, run = _project(tmp_path, capsys, fork)
    run("import", "--quilt", str(m.out))
    assert (project / "patches/geometry.patch").read_bytes() == made.read_bytes()
    run("apply")
    wt = project / ".forkpatch" / "worktree"
    run("edit", "geometry")
    (wt / "lib/long.c").write_text(both)
    (wt / "README").write_text(readme)
    (wt / "lib/new.h").write_text("#define NEW 1\n")
    (wt / "Makefile").unlink()
    run("refresh")
    got = (project / "patches/geometry.patch").read_bytes()
    assert got.startswith(header.encode())
    # The text above the diff too (quilt's diffstat block, when it writes one).
    first = re.compile(rb"(?m)^(?:Index: |--- )")
    assert got[: first.search(got).start()] == wanted[: first.search(wanted).start()]
    if "--no-timestamps" in refresh:
        assert _sections(got) == _sections(wanted)
    else:  # timestamps differ from quilt's run: compare without them
        stamp = re.compile(rb"(?m)^((?:---|\+\+\+) \S+)\t.*$")
        assert _sections(stamp.sub(rb"\1", got)) == _sections(stamp.sub(rb"\1", wanted))
    assert b"diff --git" not in got
    # quilt and forkpatch apply the rewritten file to the tree that was refreshed.
    path = project / "patches/geometry.patch"
    tree = tree_files(wt)
    assert quilt_push(fork.path, "v1", [("geometry.patch", path)], tmp_path / "q") == tree
    run("apply", "--force")
    assert tree_files(wt) == tree


def test_a_rebase_past_an_upstream_rename_keeps_the_quilt_headers(tmp_path, capsys):
    fork = _fork(tmp_path)
    m = SeriesMaker(fork, tmp_path / "make", "v1")
    made = m.quilt(
        "media.patch",
        "Media fixes.\n",
        {
            "lib/media.c": _sub(m.read("lib/media.c"), "x + 3;", "x + 3; /* m */"),
            "README": _sub(m.read("README"), "Line 2 of", "Line two of"),
        },
        refresh=("--no-timestamps",),
    )
    (m.out / "series").write_text("media.patch\n")
    # Upstream moves lib/media.c to lib/core.c (and changes nothing in it).
    fork.git("mv", "lib/media.c", "lib/core.c")
    fork.commit("upstream: rename media.c")
    fork.tag("v2")
    project, run = _project(tmp_path, capsys, fork)
    run("import", "--quilt", str(m.out))
    run("rebase", "--onto", "v2")
    text = (project / "patches/media.patch").read_text()
    assert "diff --git" not in text, text
    assert "Index: busybox-1.36/lib/core.c\n" + "=" * 67 + "\n" in text
    assert "--- busybox-1.36.orig/lib/core.c\n+++ busybox-1.36/lib/core.c\n" in text
    # The README section stayed as quilt wrote it.
    readme = made.read_text().split("Index: ")
    assert any(part.startswith("busybox-1.36/README") and part in text for part in readme)
    run("apply")
    assert "/* m */" in (project / ".forkpatch/worktree/lib/core.c").read_text()


def test_a_file_of_several_mails_rebases_mail_by_mail(tmp_path, capsys):
    fork = _fork(tmp_path)
    m = SeriesMaker(fork, tmp_path / "make", "v1")
    backport, _ids = _backport_file(m)
    (m.out / "series").write_text(f"{backport.name}\n")
    # Upstream v2 adds lines at the top of every file: each mail applies at an offset.
    for rel, text in FILES.items():
        fork.add_file(rel, ("/* v2 */\n" if rel.endswith(".c") else "# v2\n") * 3 + text)
    fork.commit("upstream: headers")
    fork.tag("v2")
    project, run = _project(tmp_path, capsys, fork)
    run("import", "--quilt", str(m.out))
    run("rebase", "--onto", "v2")
    old, new = backport.read_bytes(), (project / "patches" / backport.name).read_bytes()
    # Three mails still, each with its headers; only hunk headers (and index ids) moved.
    keep = (b"@@", b"index ")
    assert [ln for ln in old.splitlines() if not ln.startswith(keep)] == [
        ln for ln in new.splitlines() if not ln.startswith(keep)
    ]
    assert old != new
    files = [(backport.name, project / "patches" / backport.name)]
    reference = quilt_push(fork.path, "v2", files, tmp_path / "quilt")
    run("apply")
    assert tree_files(project / ".forkpatch" / "worktree") == reference
