"""What a command's start-up imports: every `rebase --continue` of a conflict-heavy
rebase, every `status` and `top` between two edits, pays for it again, so modules only
rare paths need are imported where used.

A subprocess imports what `forkpatch rebase --continue` imports (the CLI and the
rebase runner) and reports which of the heavy or rarely needed modules came along;
`forkpatch status` and `forkpatch top` run on a project and report what they loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.cli import env
from support.projects import copy_example

# Each is imported only by the commands (or the rare inputs) that need it.
LAZY = [
    "email.header",  # RFC 2047 subjects only (patchheader)
    "difflib",  # "did you mean" suggestions
    "traceback",  # --debug
    "docker",  # build-wheel in a container
    "zipfile",  # wheels
    "ssl",
    "http.client",
    "urllib.request",
    "packaging",
    "forkpatch.stack",  # rebase finishes by moving the stack; a stop does not
    "forkpatch.importer",
    "forkpatch.publish",
    "forkpatch.wheels",
    "forkpatch.smoke",
    "forkpatch.track",
    "forkpatch.demo",
]


def test_rebase_start_up_leaves_rare_modules_out():
    code = (
        "import json, sys\n"
        "import forkpatch.cli, forkpatch.cli.rebase, forkpatch.rebase.run\n"
        f"print(json.dumps([m for m in {LAZY!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, text=True)
    assert json.loads(out.stdout) == [], "imported at start-up; import it where it is used"


# What the read-only commands leave out besides: the other command groups, the rebase
# (a rebase in progress is noted only when its journal exists), the forges.
READ_ONLY_LAZY = [
    *(m for m in LAZY if m != "forkpatch.stack"),
    "forkpatch.rebase",
    "forkpatch.droppable",
    "forkpatch.upstream_status",
    "forkpatch.fetch",
    "forkpatch.cli.build",
    "forkpatch.cli.droppable",
    "forkpatch.cli.publish",
    "forkpatch.cli.rebase",
    "forkpatch.cli.smoke",
    "forkpatch.cli.track",
    "click.shell_completion",
    "unicodedata",
]

_RUN_AND_LIST = (
    "import atexit, json, sys\n"
    "atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))\n"
    "from forkpatch.entry import main\n"
    "sys.argv[0] = 'forkpatch'\n"
    "raise SystemExit(main())\n"
)


def _run_and_list(cwd: Path, *args: str) -> tuple[str, set[str]]:
    """``forkpatch ARGS`` in a fresh interpreter in ``cwd``: its stdout, and every
    module it had loaded when it ended (it must succeed)."""
    out = subprocess.run(
        [sys.executable, "-c", _RUN_AND_LIST, *args],
        cwd=cwd,
        env=env(),
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout, set(json.loads(out.stderr.splitlines()[-1]))


@pytest.mark.parametrize("command", [["status"], ["top"], ["status", "--json"], ["st"]])
def test_read_only_commands_leave_the_other_groups_out(tmp_path, capsys, command):
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    _, loaded = _run_and_list(ex.project, *command)
    if "pygit2" in loaded:  # a status computed (no kept answer): what pygit2 brings is its
        loaded -= _modules_of("import pygit2")
    assert sorted(loaded.intersection(READ_ONLY_LAZY)) == [], "import it where it is used"


def _modules_of(code: str) -> set[str]:
    """The modules a bare interpreter holds after ``code``."""
    got = subprocess.run(
        [sys.executable, "-c", f"import json, sys; {code}; print(json.dumps(sorted(sys.modules)))"],
        env=env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return set(json.loads(got.stdout))


# What `forkpatch top` reads (series.yaml, state.json, one `git log`) needs neither
# the engine nor the patch files' parser and writer.
TOP_LAZY = [
    "forkpatch.engine",
    "forkpatch.applier",
    "forkpatch.patchfile",
    "forkpatch.patchtext",
    "forkpatch.stack.commands",
    "forkpatch.stack.editing",
    "forkpatch.stack.writer",
    "forkpatch.stack.sync",
    "forkpatch.stack.refresh",
    "forkpatch.stack.export",
    "forkpatch.stack.checkout",
    "forkpatch.stack.edits",
    "forkpatch.stack.moves",
    "unidiff",
    # libgit2 costs more to load than the one `git log` top needs.
    "pygit2",
    "forkpatch.gitobj",
]


def test_top_reads_the_stack_without_the_engine_or_the_patch_parser(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    stdout, loaded = _run_and_list(ex.project, "top")
    assert stdout.strip() == "cli-version"
    assert sorted(loaded.intersection(TOP_LAZY)) == [], "import it where it is used"


# What `forkpatch --help` and `--version` need: the group alone, no project.
NO_PROJECT_LAZY = [
    "forkpatch.fsutil",
    "forkpatch.git",
    "forkpatch.sections",
    "forkpatch.series",
    "forkpatch.project",
    "forkpatch.engine",
    "forkpatch.stack",
    "yaml",
    "unidiff",
    "subprocess",
]


@pytest.mark.parametrize("option", ["--help", "--version"])
def test_help_and_version_load_no_project(tmp_path, option):
    _, loaded = _run_and_list(tmp_path, option)
    # What click itself brings on this Python (3.10's uuid imports platform, which
    # imports subprocess) is not forkpatch's to leave out.
    click_alone = subprocess.run(
        [sys.executable, "-c", "import json, sys, click; print(json.dumps(sorted(sys.modules)))"],
        env=env(),
        capture_output=True,
        text=True,
        check=True,
    )
    loaded -= set(json.loads(click_alone.stdout))
    assert sorted(loaded.intersection(NO_PROJECT_LAZY)) == [], "import it where it is used"


def test_subjects_without_encoded_words_skip_email_header():
    """A mail's plain subject is read without email.header, and reads as an encoded one
    does: whitespace collapsed, tags kept."""
    code = (
        "import json, sys\n"
        "from forkpatch.patchheader import HeaderLayout\n"
        "def subject(value):\n"
        "    return HeaderLayout.parse(f'From: A <a@b.c>\\nSubject: {value}\\n\\nBody.\\n').subject_raw\n"
        "plain = [subject(v) for v in json.loads(sys.argv[1])]\n"
        "loaded = 'email.header' in sys.modules\n"
        "print(json.dumps([plain, loaded, subject(sys.argv[2])]))\n"
    )
    values = ["[PATCH 2/5] fix  the\tthing ", "plain", "  a = b ? c  "]
    args = [json.dumps(values), "=?utf-8?q?caf=C3=A9?=  x"]
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, check=True, text=True
    )
    plain, loaded, encoded = json.loads(out.stdout)
    assert plain == ["[PATCH 2/5] fix the thing", "plain", "a = b ? c"]
    assert loaded is False, "a plain subject imported email.header"
    assert encoded == "café x"


# A status with nothing changed reads its kept answer back: it parses no patch file and
# loads neither the engine nor the commands that change the stack. (The import budget
# itself, 50 ms for status, top and rebase --continue, is measured by
# bench/bench_startup.py: a figure of the machine, not a test's.)
# (It reads what changed outside forkpatch, forkpatch.stack.sync, which loads the patch
# texts only to render a file that changed.)
STATUS_CACHED_LAZY = [
    *(m for m in TOP_LAZY if m != "forkpatch.stack.sync"),
    "forkpatch.binarypatch",
    "forkpatch.patchheader",
]


def test_a_status_read_back_loads_neither_the_engine_nor_the_parser(tmp_path, capsys):
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    ex.run("status")  # computes and keeps the answer
    stdout, loaded = _run_and_list(ex.project, "status")
    assert "cli-version" in stdout
    assert sorted(loaded.intersection(STATUS_CACHED_LAZY)) == [], "import it where it is used"


# The start-up budget of the commands run between two edits, as the modules they may
# load: forkpatch's own (a module not listed here is a deliberate addition to every
# `top` and `status`), and no package from outside the standard library (click,
# PyYAML, pygit2, unidiff: the plain forms run without click, series.yaml's kept parse
# needs no PyYAML, the kept status answer no engine). The time itself is measured by
# bench/bench_startup.py (50 ms of imports) and bench_readonly.py (0.08 s wall).
TOP_BUDGET = {
    "forkpatch",
    "forkpatch.checkids",
    "forkpatch.cli",
    "forkpatch.cli.context",
    "forkpatch.cli.dispatch",
    "forkpatch.cli.readonly",
    # The console script's offer to a command server (built-ins only; FORKPATCH_SERVER=0
    # in the tests: the command then runs in this process, as measured here).
    "forkpatch.cmdserver",
    "forkpatch.cmdserver.client",
    "forkpatch.cmdserver.wire",
    "forkpatch.entry",
    "forkpatch.errors",
    "forkpatch.escape",
    "forkpatch.forkrepo",
    "forkpatch.fsutil",
    "forkpatch.git",
    "forkpatch.kinds",
    "forkpatch.log",
    "forkpatch.project",
    "forkpatch.redact",
    "forkpatch.series",
    "forkpatch.seriescache",
    "forkpatch.settings",
    "forkpatch.stack",
    "forkpatch.stack.model",
    "forkpatch.stack.worktree",
    "forkpatch.stackstate",
    "forkpatch.trailer",
    # The state files' typed reader (the stack's state.json): it loads nothing more
    # (errors, fsutil, re).
    "forkpatch.typedreader",
    "forkpatch.views",
}
# status also reads what changed outside forkpatch (forkpatch.stack.sync) and its kept
# answer.
STATUS_BUDGET = TOP_BUDGET | {
    "forkpatch.ops",
    "forkpatch.results",
    "forkpatch.stack.sync",
}
# ... and of the standard library, what only a write, a rare path or a large digest needs:
# hashlib (OpenSSL and blake2; fsutil.digest takes CPython's own sha1/sha256 for small
# inputs), importlib.util, tempfile and shutil (with random, bz2 and lzma).
READ_ONLY_STDLIB_LAZY = ["hashlib", "importlib.util", "tempfile", "shutil", "random", "bz2"]


@pytest.mark.parametrize(
    "command, budget",
    [
        (["top"], TOP_BUDGET),
        (["-q", "top"], TOP_BUDGET),
        (["status"], STATUS_BUDGET),
        (["st", "--json"], STATUS_BUDGET),
        (["-C", ".", "series"], STATUS_BUDGET),
    ],
)
def test_top_and_status_stay_within_their_module_budget(tmp_path, capsys, command, budget):
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    ex.run("status")  # the kept status answer, and series.yaml's kept parse
    _, loaded = _run_and_list(ex.project, *command)
    loaded -= _modules_of("pass")
    ours = {m for m in loaded if m == "forkpatch" or m.startswith("forkpatch.")}
    assert sorted(ours - budget) == [], "outside the start-up budget: import it where it is used"
    outside = {m.split(".")[0] for m in loaded - ours} - set(sys.stdlib_module_names)
    assert sorted(outside) == [], "a package from outside the standard library at start-up"
    assert sorted(loaded.intersection(READ_ONLY_STDLIB_LAZY)) == [], "import it where it is used"
