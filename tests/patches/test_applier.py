"""Tests for forkpatch.applier: apply real git diffs byte for byte, offsets, fuzz, failures."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forkpatch.applier import (
    FileApplyResult,
    HunkFailed,
    apply_file_patch,
    reverse,
    split_lines,
)
from forkpatch.patchfile import FilePatch, parse_patch, render_file_patch
from support.git import git_diff

SRC = "patches/t.patch"

# --------------------------------------------------------------------------- helpers


def roundtrip(tmp: Path, before: dict[str, bytes], after: dict[str, bytes], **kw: object) -> None:
    """Apply the real git diff of before->after and its reverse; compare with the real trees."""
    diff = git_diff(tmp, before, after, **kw)  # type: ignore[arg-type]
    patch = parse_patch(b"Round trip.\n\n" + diff, source=SRC)
    assert patch.files, diff
    for fp in patch.files:
        old = before.get(fp.old_path) if fp.old_path else None
        want = after.get(fp.new_path) if fp.new_path else None
        got = apply_file_patch(old, fp)
        assert got.content == want and got.status == "clean", fp.path
        back = apply_file_patch(want, reverse(fp))
        assert back.content == old and back.status == "clean", fp.path
        # The rendered reverse is itself a parseable patch that does the same.
        (again,) = parse_patch(reverse(fp).raw, source=SRC).files
        assert apply_file_patch(want, again).content == old


def single(diff: bytes) -> FilePatch:
    (fp,) = parse_patch(diff, source=SRC).files
    return fp


BASE = b"".join(b"line %02d\n" % i for i in range(1, 31))


def _patch_for(before: bytes, after: bytes, path: str = "f.txt", n: int = 3) -> FilePatch:
    """A plain unified diff made by difflib (no `diff --git` line)."""
    diff = "".join(
        difflib.unified_diff(
            before.decode("latin-1").splitlines(keepends=True),
            after.decode("latin-1").splitlines(keepends=True),
            f"a/{path}",
            f"b/{path}",
            n=n,
        )
    )
    return single(diff.encode("latin-1"))


# --------------------------------------------------------------------------- real git round trips


def test_modify(tmp_path: Path) -> None:
    after = BASE.replace(b"line 05\n", b"five\n").replace(b"line 25\n", b"") + b"tail\n"
    roundtrip(tmp_path, {"vllm/x.py": BASE}, {"vllm/x.py": after})


def test_create(tmp_path: Path) -> None:
    roundtrip(tmp_path, {"keep": b"k\n"}, {"keep": b"k\n", "new/file.py": b"a\nb\n", "empty": b""})


def test_delete(tmp_path: Path) -> None:
    roundtrip(tmp_path, {"keep": b"k\n", "gone.py": BASE, "empty": b""}, {"keep": b"k\n"})


def test_rename(tmp_path: Path) -> None:
    roundtrip(tmp_path, {"a.py": BASE}, {"b.py": BASE})
    (tmp_path / "2").mkdir()
    roundtrip(tmp_path / "2", {"a.py": BASE}, {"sub/b.py": BASE.replace(b"line 10", b"ten")})


def test_mode_change(tmp_path: Path) -> None:
    diff = git_diff(tmp_path, {"run.sh": b"echo\n"}, {"run.sh": b"echo\n"}, modes={"run.sh": 0o755})
    fp = single(diff)
    assert (fp.old_mode, fp.new_mode) == ("100644", "100755")
    assert apply_file_patch(b"echo\n", fp) == FileApplyResult(b"echo\n", "clean", ())
    assert reverse(fp).new_mode == "100644"


def test_binary_needs_git(tmp_path: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 3
    fp = single(git_diff(tmp_path, {"i.png": png}, {"i.png": png + b"\x00more"}))
    assert fp.is_binary
    with pytest.raises(HunkFailed) as exc:
        apply_file_patch(png, fp)
    assert exc.value.reason == "binary patch: needs git apply" and exc.value.index == 0


def test_crlf_file(tmp_path: Path) -> None:
    before = b"".join(b"row %d\r\n" % i for i in range(12))
    after = before.replace(b"row 4\r\n", b"row four\r\nextra\r\n")
    roundtrip(tmp_path, {"w.bat": before}, {"w.bat": after})


def test_mixed_endings_must_match_exactly(tmp_path: Path) -> None:
    before = b"a\nb\nc\n"
    fp = single(git_diff(tmp_path, {"f": before}, {"f": b"a\nB\nc\n"}))
    with pytest.raises(HunkFailed):
        apply_file_patch(b"a\r\nb\r\nc\r\n", fp)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (b"a\nb\nc", b"a\nb\nC"),  # no final newline on both sides
        (b"a\nb\nc", b"a\nb\nc\n"),  # newline added
        (b"a\nb\nc\n", b"a\nb\nc"),  # newline removed
        (b"a\nb\nc", b"a\nb\nc\nd"),  # line appended after a last line without newline
        (b"only", b""),
        (b"", b"only"),
        (BASE + b"end", BASE.replace(b"line 02", b"two") + b"end"),  # change far from the end
    ],
)
def test_no_newline_at_end(tmp_path: Path, before: bytes, after: bytes) -> None:
    roundtrip(tmp_path, {"n.txt": before}, {"n.txt": after})


def test_invalid_utf8_content(tmp_path: Path) -> None:
    before = b"ok\n\xff\xfe bad\n\x0c form feed\nmid\rcr\n" + BASE
    after = before.replace(b"\xff\xfe bad", b"\xc3\x28 worse").replace(b"line 20", b"\x80")
    roundtrip(tmp_path, {"bin-ish.txt": before}, {"bin-ish.txt": after})


def test_quoted_non_ascii_path(tmp_path: Path) -> None:
    roundtrip(tmp_path, {'dir é/ü "q".py': b"1\n2\n"}, {'dir é/ü "q".py': b"1\n3\n"})


def test_many_hunks(tmp_path: Path) -> None:
    before = b"".join(b"l%d\n" % i for i in range(400))
    after = before
    for k in (3, 50, 51, 120, 200, 399):
        after = after.replace(b"l%d\n" % k, b"L%d\nnew\n" % k)
    roundtrip(tmp_path, {"big": before}, {"big": after})


# --------------------------------------------------------------------------- offset / fuzz


def test_offset_when_lines_inserted_above() -> None:
    fp = _patch_for(BASE, BASE.replace(b"line 15\n", b"fifteen\n").replace(b"line 25\n", b"x\n"))
    moved = b"new 1\nnew 2\nnew 3\n" + BASE
    res = apply_file_patch(moved, fp)
    assert res.content == b"new 1\nnew 2\nnew 3\n" + BASE.replace(
        b"line 15\n", b"fifteen\n"
    ).replace(b"line 25\n", b"x\n")
    assert res.status == "offset"
    assert [(h.status, h.offset) for h in res.hunks] == [("offset", 3), ("offset", 3)]
    assert res.hunks[0].line == 12 + 3
    with pytest.raises(HunkFailed) as exc:
        apply_file_patch(moved, fp, allow_offset=False)
    assert exc.value.index == 1 and exc.value.line == 12


def test_offset_lines_removed_above() -> None:
    fp = _patch_for(BASE, BASE.replace(b"line 20\n", b"twenty\n"))
    shorter = BASE.replace(b"line 02\n", b"").replace(b"line 03\n", b"")
    res = apply_file_patch(shorter, fp)
    assert res.content == shorter.replace(b"line 20\n", b"twenty\n")
    assert res.hunks[0].offset == -2 and res.status == "offset"


def test_nearest_match_wins() -> None:
    block = b"x\ny\nz\nold\nx\ny\nz\n"
    fp = _patch_for(b"pad\n" * 10 + block, b"pad\n" * 10 + block.replace(b"old", b"new"))
    # Same block twice: the copy nearer the expected position is patched.
    text = b"pad\n" * 2 + block + b"pad\n" * 7 + block
    res = apply_file_patch(text, fp)
    assert res.content == b"pad\n" * 2 + block + b"pad\n" * 7 + block.replace(b"old", b"new")
    assert res.hunks[0].offset == 6 and res.hunks[0].line == 17


def test_fuzz() -> None:
    fp = _patch_for(BASE, BASE.replace(b"line 15\n", b"fifteen\n"))
    drifted = BASE.replace(b"line 13\n", b"thirteen\n")  # a context line changed
    with pytest.raises(HunkFailed) as exc:
        apply_file_patch(drifted, fp)
    assert exc.value.index == 1 and exc.value.line == 12 and "line 13" in exc.value.reason
    res = apply_file_patch(drifted, fp, max_fuzz=2)
    assert res.status == "fuzz" and res.hunks[0].fuzz == 2
    assert res.content == drifted.replace(b"line 15\n", b"fifteen\n")


def test_fuzz_one_is_enough_for_outer_context() -> None:
    fp = _patch_for(BASE, BASE.replace(b"line 15\n", b"fifteen\n"))
    drifted = BASE.replace(b"line 18\n", b"eighteen\n")
    res = apply_file_patch(drifted, fp, max_fuzz=3)
    assert res.hunks[0].fuzz == 1 and res.content == drifted.replace(b"line 15\n", b"fifteen\n")


def test_fuzz_refuses_when_changed_lines_differ() -> None:
    fp = _patch_for(BASE, BASE.replace(b"line 15\n", b"fifteen\n"))
    with pytest.raises(HunkFailed) as exc:
        apply_file_patch(BASE.replace(b"line 15\n", b"LINE 15\n"), fp, max_fuzz=3)
    assert exc.value.index == 1


def test_hunk_at_start_is_anchored() -> None:
    fp = _patch_for(BASE, b"header\n" + BASE)
    assert apply_file_patch(BASE, fp).content == b"header\n" + BASE
    # The file now starts elsewhere: "add at the start" must not land in the middle.
    with pytest.raises(HunkFailed):
        apply_file_patch(b"license\n" + BASE, fp)


def test_hunk_at_end_is_anchored() -> None:
    fp = _patch_for(BASE, BASE + b"footer\n")
    assert apply_file_patch(BASE, fp).content == BASE + b"footer\n"
    with pytest.raises(HunkFailed):
        apply_file_patch(BASE + b"more\n", fp)


def test_second_hunk_failure_reports_its_index() -> None:
    fp = _patch_for(BASE, BASE.replace(b"line 03\n", b"three\n").replace(b"line 25\n", b"x\n"))
    assert len(fp.hunks) == 2
    with pytest.raises(HunkFailed) as exc:
        apply_file_patch(BASE.replace(b"line 25\n", b"changed\n"), fp)
    assert exc.value.index == 2 and exc.value.line == 22
    assert "hunk 2 at line 22" in str(exc.value)


def test_hunks_do_not_overlap() -> None:
    text = b"a\nb\nc\nd\ne\n"
    raw = b"--- a/f\n+++ b/f\n@@ -2,3 +2,3 @@\n b\n-c\n+C\n d\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"
    with pytest.raises(HunkFailed) as exc:
        apply_file_patch(text, single(raw))
    assert exc.value.index == 2


def test_create_onto_existing_and_change_missing() -> None:
    create = single(b"--- /dev/null\n+++ b/n\n@@ -0,0 +1 @@\n+x\n")
    assert apply_file_patch(None, create).content == b"x\n"
    with pytest.raises(HunkFailed, match="already exists"):
        apply_file_patch(b"", create)
    change = single(b"--- a/n\n+++ b/n\n@@ -1 +1 @@\n-x\n+y\n")
    with pytest.raises(HunkFailed, match="does not exist"):
        apply_file_patch(None, change)


def test_delete_requires_whole_content() -> None:
    delete = single(b"--- a/n\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-x\n-y\n")
    assert apply_file_patch(b"x\ny\n", delete).content is None
    with pytest.raises(HunkFailed):
        apply_file_patch(b"x\ny\nz\n", delete)
    with pytest.raises(HunkFailed):
        apply_file_patch(b"w\nx\ny\n", delete, max_fuzz=3)


def test_reverse_detects_already_applied() -> None:
    after = BASE.replace(b"line 10\n", b"ten\n")
    fp = _patch_for(BASE, after)
    assert apply_file_patch(after, reverse(fp)).content == BASE
    with pytest.raises(HunkFailed):
        apply_file_patch(BASE, reverse(fp))
    rev = reverse(fp)
    assert (rev.added, rev.removed) == (fp.removed, fp.added)
    assert reverse(rev).hunks == fp.hunks


def test_render_of_parsed_git_patch_is_identical(tmp_path: Path) -> None:
    diff = git_diff(
        tmp_path,
        {"a": BASE, "gone": b"g\n", "n": b"x\ny"},
        {"a": BASE.replace(b"line 09", b"nine"), "new": b"hi\n", "n": b"x\nz"},
    )
    for fp in parse_patch(diff, source=SRC).files:
        assert render_file_patch(fp) == fp.raw


# --------------------------------------------------------------------------- properties

lines_st = st.lists(
    st.sampled_from([b"a\n", b"b\n", b"c\n", b"d\n", b"\n", b"e\r\n", b"\xff\n"]), max_size=40
)


@st.composite
def edited(draw: st.DrawFn) -> tuple[bytes, bytes]:
    old = draw(lines_st)
    new = list(old)
    for _ in range(draw(st.integers(0, 6))):
        op = draw(st.sampled_from(["ins", "del", "rep"]))
        pos = draw(st.integers(0, len(new)))
        line = draw(st.sampled_from([b"X\n", b"Y\n", b"a\n", b"\n"]))
        if op == "ins":
            new.insert(pos, line)
        elif new and pos < len(new):
            if op == "del":
                del new[pos]
            else:
                new[pos] = line
    old_b, new_b = b"".join(old), b"".join(new)
    if draw(st.booleans()) and old_b:
        old_b = old_b[:-1]  # no newline at the end
    if draw(st.booleans()) and new_b:
        new_b = new_b[:-1]
    return old_b, new_b


def _unified(old: bytes, new: bytes, n: int) -> bytes:
    """A unified diff of two byte strings, with GNU's no-newline markers (difflib has none)."""
    out = [b"--- a/f\n", b"+++ b/f\n"]
    a = old.split(b"\n")
    b = new.split(b"\n")
    a_lines = [x + b"\n" for x in a[:-1]] + ([a[-1]] if a[-1] else [])
    b_lines = [x + b"\n" for x in b[:-1]] + ([b[-1]] if b[-1] else [])
    if a_lines == b_lines:
        return b""
    for group in difflib.SequenceMatcher(
        None, a_lines, b_lines, autojunk=False
    ).get_grouped_opcodes(n):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        old_start = i1 + 1 if i2 > i1 else i1
        new_start = j1 + 1 if j2 > j1 else j1
        out.append(b"@@ -%d,%d +%d,%d @@\n" % (old_start, i2 - i1, new_start, j2 - j1))

        def emit(prefix: bytes, line: bytes) -> None:
            out.append(prefix + line)
            if not line.endswith(b"\n"):
                out.append(b"\n\\ No newline at end of file\n")

        for tag, x1, x2, y1, y2 in group:
            if tag == "equal":
                for line in a_lines[x1:x2]:
                    emit(b" ", line)
                continue
            for line in a_lines[x1:x2]:
                emit(b"-", line)
            for line in b_lines[y1:y2]:
                emit(b"+", line)
    return b"".join(out)


@settings(max_examples=300, deadline=None)
@given(pair=edited(), n=st.integers(0, 4))
def test_property_apply_plain_diff(pair: tuple[bytes, bytes], n: int) -> None:
    old, new = pair
    diff = _unified(old, new, n)
    if not diff:
        return
    (fp,) = parse_patch(b"Random edit.\n\n" + diff, source=SRC).files
    # A plain diff whose old (new) side is empty reads as a creation (deletion), like GNU patch.
    before = None if fp.old_path is None else old
    after = None if fp.new_path is None else new
    assert apply_file_patch(before, fp).content == after
    assert apply_file_patch(after, reverse(fp)).content == before


@st.composite
def unique_edit(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """Old lines that are all different, so a hunk can match in one place only."""
    old = [b"L%d\n" % i for i in range(draw(st.integers(1, 40)))]
    new = list(old)
    for k in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(new)))
        if draw(st.booleans()) or pos == len(new):
            new.insert(pos, b"N%d\n" % k)
        else:
            del new[pos]
    return b"".join(old), b"".join(new)


@settings(max_examples=150, deadline=None)
@given(pair=unique_edit(), k=st.integers(1, 5))
def test_property_offset(pair: tuple[bytes, bytes], k: int) -> None:
    old, new = pair
    diff = _unified(old, new, 3)
    if not diff:
        return
    (fp,) = parse_patch(diff, source=SRC).files
    prefix = b"p\n" * k
    try:
        res = apply_file_patch(prefix + old, fp)
    except HunkFailed as exc:
        # Only a hunk anchored at the start of the file (less leading context) may refuse.
        hunk = fp.hunks[exc.index - 1]
        assert exc.index == 1 and hunk.old_start == 1
        return
    assert res.content == prefix + new
    assert res.status == "offset" and all(h.offset == k for h in res.hunks)


@given(st.binary(max_size=200))
def test_split_lines_splits_on_newline_only(data: bytes) -> None:
    parts = data.split(b"\n")
    want = [p + b"\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    assert split_lines(data) == want
    assert split_lines(data.replace(b"\r", b"\x0b")) == [x.replace(b"\r", b"\x0b") for x in want]


@pytest.mark.parametrize(
    ("theirs", "expected", "found"),
    [
        (b"import os\nimport sys\n", "'import importlib.metadata'", "'import os'"),
        (b"x = 1\n\xff\xfe\n", "'import importlib.metadata'", "'x = 1'"),
        (b"\x1b[31mred\r\n", "'import importlib.metadata'", "'\\x1b[31mred'"),
        (b"", "'import importlib.metadata'", "end of file"),
    ],
    ids=["text", "not-utf8", "escape-and-crlf", "empty-file"],
)
def test_a_failed_hunk_shows_the_lines_as_text(tmp_path: Path, theirs, expected, found) -> None:
    ours = b"import importlib.metadata\nimport sys\n"
    fp = single(git_diff(tmp_path, {"f.py": ours}, {"f.py": ours + b"print(sys.argv)\n"}))
    with pytest.raises(HunkFailed) as exc:
        apply_file_patch(theirs, fp)
    reason = exc.value.reason
    assert "b'" not in reason and 'b"' not in reason, reason
    assert f"expected {expected}, found {found}" in reason or reason.startswith("the file has")
