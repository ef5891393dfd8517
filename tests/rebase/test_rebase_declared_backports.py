"""Upstream evidence a maintainer accepts, on series made by the real tools.

* A declared backport (OE's ``Upstream-Status: Backport [...?id=X]``, DEP-3
  ``Origin:`` / ``Applied-Upstream:``, ``(cherry picked from commit X)``, the mail's
  ``From X`` line) of a commit the target contains, adapted (its patch-id and even its
  lines differ: OE busybox's ``0001-time-Use-64-prefix-syscall-if-we-have-to.patch``
  on 1_31_1, which conflicts on 1_32_0 in ``libbb/time.c``): ``upstreamed``, naming
  X. Where X touches other files than the patch, a stop that names X and the way out.
* A plain diff with no subject, author or commit id (OpenWrt collectd's
  ``920-fix-ubi-data-source-type.patch``) whose added and removed lines are exactly
  one upstream commit's (collectd 7682a20f7 on 5.12.0), or several commits' together:
  ``upstreamed``, naming the commit(s).

The histories are small copies of the real ones (the same shape of change, in a
scratch repository); the patch files are written by ``git format-patch``, ``quilt
refresh`` and GNU ``diff``, with the headers as OE, Debian and OpenWrt write them.
"""

from __future__ import annotations

import json

import pytest

from support.cli import Runner
from support.git import ScratchRepo
from support.series_styles import SeriesMaker

TIME_C = """\
#include "libbb.h"

char* FAST_FUNC strftime_YYYYMMDDHHMMSS(char *buf, unsigned len, time_t *tp)
{
	return strftime_fmt(buf, len, tp, "%Y-%m-%d %H:%M:%S");
}

/* Don't use clock_gettime(), it's in librt:
 * typically requiring -lrt. We just skip all this mess */
static void get_mono(struct timespec *ts)
{
	if (syscall(__NR_clock_gettime, CLOCK_MONOTONIC, ts))
		bb_error_msg_and_die("clock_gettime(MONOTONIC) failed");
}
unsigned long long FAST_FUNC monotonic_ns(void)
{
	struct timespec ts;
	get_mono(&ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}
"""
DATE_C = "int date_main(void)\n{\n\treturn stime(&tm);\n}\n"
SYSCALL = "\tif (syscall(__NR_clock_gettime, CLOCK_MONOTONIC, ts))\n"
SIXTY_FOUR = (
    "#elif __TIMESIZE == 64\n"
    "\tif (syscall(__NR_clock_gettime64, CLOCK_MONOTONIC, ts))\n"
    "#else\n"
    '# error "We currently don\'t support architectures without " \\\n'
    '\t"the __NR_clock_gettime syscall and 32-bit time_t"\n'
    "#endif\n"
)
SUBJECT = "time: Use 64 prefix syscall if we have to"


class Busybox:
    """1_31_1 (v1), then upstream: the error-message rename that moves the backport's
    context, the 64-bit syscall commit the backport is of (``named``), the removal of
    the syscall wrappers that rewrites the same lines; 1_32_0 (v2)."""

    def __init__(self, tmp_path, *, named_touches_date: bool = False) -> None:
        fork = self.fork = ScratchRepo(tmp_path / "busybox")
        fork.add_file("libbb/time.c", TIME_C)
        fork.add_file("coreutils/date.c", DATE_C)
        fork.commit("initial")
        fork.tag("v1")
        simple = TIME_C.replace("bb_error_msg_and_die", "bb_simple_error_msg_and_die")
        fork.add_file("libbb/time.c", simple)
        fork.commit("libbb: reduce the overhead of single parameter bb_error_msg() calls")
        fork.add_file(
            "libbb/time.c",
            simple.replace(SYSCALL, "#if defined(__NR_clock_gettime)\n" + SYSCALL + SIXTY_FOUR),
        )
        if named_touches_date:
            fork.add_file("coreutils/date.c", DATE_C.replace("stime", "stime64"))
        self.named = fork.commit(f"{SUBJECT}\n\nSigned-off-by: Alistair Francis")
        fork.add_file(
            "libbb/time.c",
            simple.replace(
                SYSCALL + '\t\tbb_simple_error_msg_and_die("clock_gettime(MONOTONIC) failed");\n',
                "\tclock_gettime(CLOCK_MONOTONIC, ts);\n",
            ),
        )
        fork.commit("Remove syscall wrappers around clock_gettime, closes 12091")
        fork.add_file("README", "1.32.0\n")
        fork.commit("Bump version to 1.32.0")
        fork.tag("v2")

    def backport(self, tmp_path, how: str):
        """The adapted backport on v1, written by the real tool for ``how``: its lines
        differ from upstream's too (the syscall line is removed and added again with a
        stray space, as in OE's file)."""
        maker = SeriesMaker(self.fork, tmp_path / "made", "v1")
        adapted = {
            "libbb/time.c": TIME_C.replace(
                SYSCALL, "#if defined(__NR_clock_gettime)\n \t" + SYSCALL[1:] + SIXTY_FOUR
            )
        }
        sha = self.named
        name = "0001-time-Use-64-prefix-syscall-if-we-have-to.patch"
        if how == "quilt Origin":
            header = f"Description: {SUBJECT}\nOrigin: upstream, https://git.busybox.net/busybox/commit/?id={sha}\n"
            return maker.quilt(name, header, adapted, refresh=["--no-timestamps"])
        if how == "quilt Origin URL":
            header = (
                f"Description: {SUBJECT}\nOrigin: https://github.com/mirror/busybox/commit/{sha}\n"
            )
            return maker.quilt(name, header, adapted, refresh=["--no-timestamps"])
        lines = {
            "Upstream-Status": f"Upstream-Status: Backport [https://git.busybox.net/busybox/commit/?id={sha}]",
            "Applied-Upstream": f"Applied-Upstream: 1.32.0, https://git.busybox.net/busybox/commit/?id={sha}",
            "cherry picked from": f"(cherry picked from commit {sha})",
            "From": "",
        }
        message = f"{SUBJECT}\n\nSome 32-bit architectures no longer have the 32-bit time_t syscalls.\n\n{lines[how]}\nSigned-off-by: Alistair Francis\n"
        path = maker.format_patch(name, message, adapted)
        text = path.read_text()
        # OE formats the upstream commit and adapts it: its mbox line names that commit.
        first, rest = text.split("\n", 1)
        sha_there = first.split()[1]
        path.write_text(first.replace(sha_there, sha if how == "From" else "0" * 40) + "\n" + rest)
        return path


def _project(tmp_path, capsys, fork: ScratchRepo, *patches) -> Runner:
    project = tmp_path / "project"
    project.mkdir()
    run = Runner(project, capsys)
    run("init", "--fork-url", str(fork.path), "--base", "v1")
    run("import", *map(str, patches))
    return run


def _check(run: Runner, expect: int = 0) -> dict:
    _, out, _ = run("check", "--onto", "v2", "--json", expect=expect)
    return json.loads(out)["patches"][-1]


HOW = [
    "Upstream-Status",
    "Applied-Upstream",
    "cherry picked from",
    "From",
    "quilt Origin",
    "quilt Origin URL",
]


@pytest.mark.parametrize("how", HOW)
def test_an_adapted_declared_backport_that_conflicts_is_upstreamed(tmp_path, capsys, how):
    bb = Busybox(tmp_path)
    run = _project(tmp_path, capsys, bb.fork, bb.backport(tmp_path, how))
    p = _check(run)
    assert p["status"] == "upstreamed", p
    assert p["evidence"].startswith("declared backport: upstream commit " + bb.named[:12])
    assert f"'{SUBJECT}'" in p["evidence"] and "is in v2" in p["evidence"]
    _, out, _ = run("rebase", "--onto", "v2", "--json")
    dropped = json.loads(out)["dropped"]
    assert [d["name"] for d in dropped] == [p["name"]] and bb.named[:12] in dropped[0]["reason"]


def test_without_the_declaration_it_is_a_conflict(tmp_path, capsys):
    """The same adapted change with no reference: nothing says where it came from."""
    bb = Busybox(tmp_path)
    path = bb.backport(tmp_path, "Upstream-Status")
    text = path.read_text()
    path.write_text("\n".join(ln for ln in text.split("\n") if "Upstream-Status" not in ln))
    path.write_text(path.read_text().replace(bb.named, "0" * 40))
    run = _project(tmp_path, capsys, bb.fork, path)
    assert _check(run, expect=3)["status"] == "conflict"


def test_a_declared_backport_of_a_commit_with_other_files_stops_naming_it(tmp_path, capsys):
    """The named commit changed coreutils/date.c too: the patch may be a part of it, or
    more; the stop names the commit and says what most likely to do."""
    bb = Busybox(tmp_path, named_touches_date=True)
    run = _project(tmp_path, capsys, bb.fork, bb.backport(tmp_path, "Upstream-Status"))
    p = _check(run, expect=3)
    assert p["status"] == "conflict"
    want = f"declared backport of {bb.named[:12]} '{SUBJECT}'"
    assert p["replaced_by"].startswith(want)
    _, _, err = run("rebase", "--onto", "v2", expect=3)
    assert want in err and "which v2 contains: most likely `forkpatch rebase --skip`" in err
    run("rebase", "--skip")


def test_a_declared_backport_of_a_commit_outside_the_target_is_no_evidence(tmp_path, capsys):
    bb = Busybox(tmp_path)
    path = bb.backport(tmp_path, "Upstream-Status")
    path.write_text(path.read_text().replace(bb.named, "1234abcd" * 5))
    run = _project(tmp_path, capsys, bb.fork, path)
    p = _check(run, expect=3)
    assert p["status"] == "conflict" and "declared backport" not in p.get("replaced_by", "")


# --------------------------------------------------------------------------- plain diffs

UBI_C = (
    """\
static void ubi_submit(const char *dev_name, const char *type,
                       counter_t value) {
  value_list_t vl = VALUE_LIST_INIT;

  if (ignorelist_match(ignorelist, dev_name) != 0)
    return;

  vl.values = &(value_t){.counter = value};
  vl.values_len = 1;
  sstrncpy(vl.plugin, PLUGIN_NAME, sizeof(vl.plugin));
} /* void ubi_submit */
"""
    + "".join(f"/* filler {i} */\n" for i in range(30))
    + """\
static int ubi_read_dev_attr(const char *dev_name, const char *attr) {
  ubi_submit(dev_name, attr, (counter_t)val);

  return 0;
} /* int ubi_read_dev_attr */
"""
)
TYPES_DB = "".join(f"type_{i:02d}                 value:GAUGE:0:U\n" for i in range(20)).replace(
    "type_07                 value:GAUGE:0:U", "bad_peb_count           value:COUNTER:0:U"
)
FIXED_UBI = (
    UBI_C.replace("counter_t value", "gauge_t value")
    .replace(".counter = value", ".gauge = value")
    .replace("(counter_t)val", "(gauge_t)val")
)
FIXED_TYPES = TYPES_DB.replace(
    "bad_peb_count           value:COUNTER", "bad_peb_count           value:GAUGE"
)


class Collectd:
    """5.11.0 (v1); upstream fixes the data source type (as one commit, or as two),
    then restyles the same lines (so the plain diff neither applies nor
    reverse-applies); 5.12.0 (v2)."""

    def __init__(self, tmp_path, *, split: bool = False) -> None:
        fork = self.fork = ScratchRepo(tmp_path / "collectd")
        fork.add_file("src/ubi.c", UBI_C)
        fork.add_file("src/types.db", TYPES_DB)
        fork.commit("initial")
        fork.tag("v1")
        if split:
            fork.add_file("src/ubi.c", FIXED_UBI)
            first = fork.commit("ubi: submit gauges")
            fork.add_file("src/types.db", FIXED_TYPES)
            self.fixes = (first, fork.commit("types.db: bad_peb_count is a gauge"))
        else:
            fork.add_file("src/ubi.c", FIXED_UBI)
            fork.add_file("src/types.db", FIXED_TYPES)
            self.fixes = (fork.commit("ubi: fix data source type"),)
        fork.add_file("src/ubi.c", FIXED_UBI.replace("gauge_t value) {", "gauge_t value)\n{"))
        fork.commit("ubi: correct code style with contrib/format.sh")
        fork.tag("v2")

    def plain_diff(self, tmp_path, tool: str, *, ubi: str = FIXED_UBI):
        maker = SeriesMaker(self.fork, tmp_path / "made", "v1", pkg="collectd-5.11.0")
        files = {"src/ubi.c": ubi, "src/types.db": FIXED_TYPES}
        name = "920-fix-ubi-data-source-type.patch"
        if tool == "quilt":
            return maker.quilt(
                name, "", files, refresh=["--no-timestamps", "--no-index", "-p", "ab"]
            )
        return maker.gnu_diff(name, "", files)


@pytest.mark.parametrize("tool", ["quilt", "diff"])
def test_a_plain_diff_with_exactly_one_commits_lines_is_upstreamed(tmp_path, capsys, tool):
    cd = Collectd(tmp_path)
    run = _project(tmp_path, capsys, cd.fork, cd.plain_diff(tmp_path, tool))
    p = _check(run)
    assert p["status"] == "upstreamed", p
    assert cd.fixes[0][:12] in p["evidence"] and "'ubi: fix data source type'" in p["evidence"]
    assert "exactly the patch's added and removed lines" in p["evidence"]


def test_a_plain_diff_with_two_commits_lines_together_is_upstreamed(tmp_path, capsys):
    cd = Collectd(tmp_path, split=True)
    run = _project(tmp_path, capsys, cd.fork, cd.plain_diff(tmp_path, "diff"))
    p = _check(run)
    assert p["status"] == "upstreamed", p
    assert all(c[:12] in p["evidence"] for c in cd.fixes)


def test_a_plain_diff_with_other_lines_conflicts(tmp_path, capsys):
    cd = Collectd(tmp_path)
    other = FIXED_UBI.replace("(gauge_t)val", "(gauge_t)(val + 0)")
    run = _project(tmp_path, capsys, cd.fork, cd.plain_diff(tmp_path, "diff", ubi=other))
    assert _check(run, expect=3)["status"] == "conflict"
