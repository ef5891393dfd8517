"""A command's result goes to stdout, progress and diagnostics to stderr, --json alone
to stdout (as git and quilt do): `forkpatch status | less` shows the table."""

from __future__ import annotations

import json

import pytest

from support.projects import copy_example

# command -> words of its result that must be on stdout (and not on stderr)
RESULTS = {
    ("status",): ["capability-floor", "clean", "base v1.2.1"],
    ("check", "--onto", "v1.3.0"): ["v1.2.1", "v1.3.0", "cli-version"],
    ("track", "--no-forecast"): ["newer release tag(s)", "v1.3.0", "new release: v1.3.0"],
    ("top",): ["cli-version"],
    ("pop",): ["popped cli-version", "now at eager-block-cast"],
    ("export",): ["0 patch file(s) changed"],
    ("refresh",): ["nothing changed"],
}
EXIT = {("track", "--no-forecast"): 10}
JSON = ("status", "check", "track")


@pytest.mark.parametrize("args", list(RESULTS), ids=" ".join)
def test_the_result_of_a_command_is_on_stdout(tmp_path, capsys, args):
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    _, out, err = ex.run(*args, expect=EXIT.get(args, 0))
    for words in RESULTS[args]:
        assert words in out, f"{' '.join(args)}: {words!r} not on stdout\nstdout:{out}\nerr:{err}"
    assert "capability-floor  " not in err and "patch(es)" not in err, err


@pytest.mark.parametrize("args", [a for a in RESULTS if a[0] in JSON], ids=" ".join)
def test_json_is_alone_on_stdout(tmp_path, capsys, args):
    ex = copy_example(tmp_path, capsys)
    ex.run("apply")
    _, out, _err = ex.run(*args, "--json", expect=EXIT.get(args, 0))
    json.loads(out)  # one document and nothing else
