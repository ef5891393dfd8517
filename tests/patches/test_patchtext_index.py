"""The rewrite of a patch reads each file's full ``index`` line from git's diff
without parsing the hunks again (``git_index_lines``): it must find what a full
parse finds."""

from __future__ import annotations

import pytest

from forkpatch.patchfile import FilePatch, parse_patch, split_lines
from forkpatch.patchtext import git_index_lines
from support.git import git_diff

TEXT = b"".join(b"line %d\n" % i for i in range(40))
CASES = {
    "one modified file": ({"a.py": TEXT}, {"a.py": TEXT.replace(b"line 7\n", b"seven\n")}, None),
    "new, deleted and modified": (
        {"gone.txt": b"x\n", "m/b.py": TEXT},
        {"new.txt": b"diff --git a/x b/x\nindex 1..2\n", "m/b.py": TEXT + b"end\n"},
        None,
    ),
    "rename with a change, and a pure rename": (
        {"old.py": TEXT, "same.py": TEXT + b"same\n"},
        {"new.py": TEXT.replace(b"line 3\n", b"three\n"), "moved.py": TEXT + b"same\n"},
        None,
    ),
    "mode change only": ({"run.sh": b"echo\n"}, {"run.sh": b"echo\n"}, {"run.sh": 0o755}),
    "binary and text": (
        {"blob.bin": bytes(range(256)) * 4, "t.txt": TEXT},
        {"blob.bin": bytes(range(255, -1, -1)) * 4, "t.txt": b"--- not a header\n" + TEXT},
        None,
    ),
}


def _parsed_index_line(fp: FilePatch) -> bytes | None:
    """The ``index`` line of a parsed file section: no hunk line (' ', '-', '+', '\\',
    '@@') and no base85 line of a binary block (no spaces) starts with "index "."""
    return next((ln for ln in split_lines(fp.raw) if ln.startswith(b"index ")), None)


@pytest.mark.parametrize("name", list(CASES))
def test_index_lines_match_a_full_parse(tmp_path, name):
    before, after, modes = CASES[name]
    raw = git_diff(tmp_path, before, after, modes)
    parsed = [_parsed_index_line(f) for f in parse_patch(raw, source="x").files]
    assert git_index_lines(raw) == parsed
    assert len(parsed) >= 1


def test_index_lines_of_no_diff_or_another_tool_ask_for_a_parse():
    assert git_index_lines(b"") == []
    assert git_index_lines(b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n") == []
