"""Tests for forkpatch.patchfile: parsing real git / plain diffs, path safety, canonical bytes."""

from __future__ import annotations

import base64
import zlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forkpatch.errors import PatchParseError, PathSafetyError
from forkpatch.patchfile import (
    check_path,
    check_paths,
    format_patch,
    normalise_header,
    parse_patch,
    quote_path,
)
from support.git import git_diff

SRC = "patches/foo.patch"

# --------------------------------------------------------------------------- helpers


# --------------------------------------------------------------------------- git diffs


def test_modify(tmp_path: Path) -> None:
    diff = git_diff(tmp_path, {"vllm/x.py": b"a\nb\nc\n"}, {"vllm/x.py": b"a\nB\nc\nd\n"})
    p = parse_patch(diff, source=SRC)
    assert p.header == "" and p.diff == diff and p.source == SRC
    (f,) = p.files
    assert (f.old_path, f.new_path, f.path) == ("vllm/x.py", "vllm/x.py", "vllm/x.py")
    assert f.old_mode == f.new_mode == "100644"
    assert f.old_oid and len(f.old_oid) == 40 and f.new_oid and len(f.new_oid) == 40
    assert not (f.is_binary or f.is_rename or f.is_copy)
    assert (f.added, f.removed, p.added, p.removed) == (2, 1, 2, 1)
    (h,) = f.hunks
    assert (h.old_start, h.old_len, h.new_start, h.new_len) == (1, 3, 1, 4)
    assert h.old_lines == (b"a\n", b"b\n", b"c\n")
    assert h.new_lines == (b"a\n", b"B\n", b"c\n", b"d\n")
    assert f.raw == diff


def test_create_and_delete(tmp_path: Path) -> None:
    diff = git_diff(tmp_path, {"old.txt": b"bye\n"}, {"new.txt": b"hi\nthere\n"})
    p = parse_patch(diff, source=SRC)
    by = {f.path: f for f in p.files}
    new, old = by["new.txt"], by["old.txt"]
    assert new.old_path is None and new.new_path == "new.txt" and new.new_mode == "100644"
    assert new.old_mode is None and new.old_oid is None and new.added == 2
    assert old.new_path is None and old.old_path == "old.txt" and old.old_mode == "100644"
    assert old.new_mode is None and old.new_oid is None and old.removed == 1
    assert b"".join(f.raw for f in p.files) == diff
    assert set(p.paths) == {"new.txt", "old.txt"}


def test_rename_with_change(tmp_path: Path) -> None:
    body = b"".join(b"line %d\n" % i for i in range(20))
    diff = git_diff(tmp_path, {"a/one.py": body}, {"b/two.py": body.replace(b"line 7", b"LINE 7")})
    (f,) = parse_patch(diff, source=SRC).files
    assert f.is_rename and not f.is_copy
    assert (f.old_path, f.new_path) == ("a/one.py", "b/two.py")
    assert f.similarity is not None and 80 <= f.similarity < 100
    assert len(f.hunks) == 1 and f.added == f.removed == 1


def test_pure_rename_and_mode_change(tmp_path: Path) -> None:
    diff = git_diff(
        tmp_path,
        {"x.sh": b"echo\n", "keep": b"k\n"},
        {"y.sh": b"echo\n", "keep": b"k\n"},
        modes={"keep": 0o755},
    )
    by = {f.path: f for f in parse_patch(diff, source=SRC).files}
    assert by["y.sh"].is_rename and by["y.sh"].similarity == 100 and by["y.sh"].hunks == ()
    assert by["y.sh"].old_path == "x.sh"
    keep = by["keep"]
    assert (keep.old_mode, keep.new_mode) == ("100644", "100755") and keep.hunks == ()


def test_binary(tmp_path: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4
    diff = git_diff(tmp_path, {"img.png": png, "t": b"x\n"}, {"img.png": png[::-1], "t": b"y\n"})
    p = parse_patch(diff, source=SRC)
    by = {f.path: f for f in p.files}
    assert by["img.png"].is_binary and by["img.png"].hunks == ()
    assert b"GIT binary patch" in by["img.png"].raw
    assert not by["t"].is_binary and by["t"].added == 1
    assert b"".join(f.raw for f in p.files) == diff


def test_binary_files_differ_line() -> None:
    diff = (
        b"diff --git a/img.png b/img.png\n"
        b"index 1234567..89abcde 100644\n"
        b"Binary files a/img.png and b/img.png differ\n"
        b"diff --git a/new.bin b/new.bin\n"
        b"new file mode 100644\n"
        b"index 0000000..89abcde\n"
        b"Binary files /dev/null and b/new.bin differ\n"
    )
    a, b = parse_patch(diff, source=SRC).files
    assert a.is_binary and a.old_path == a.new_path == "img.png"
    assert b.is_binary and b.old_path is None and b.old_oid is None and b.new_oid == "89abcde"


def test_crlf_and_invalid_utf8_content_survive(tmp_path: Path) -> None:
    before = b"one\r\ntwo\r\nthr\xff\xfeee\r\n\x0cfeed\r\n"
    after = b"one\r\nTWO\r\nthr\xff\xfeee\r\n\x0cfeed\r\n"
    diff = git_diff(tmp_path, {"w.txt": before}, {"w.txt": after})
    p = parse_patch(diff, source=SRC)
    (h,) = p.files[0].hunks
    assert b"".join(h.old_lines) == before and b"".join(h.new_lines) == after
    assert p.diff == diff


def test_no_newline_at_end_both_sides(tmp_path: Path) -> None:
    diff = git_diff(tmp_path, {"n": b"a\nb"}, {"n": b"a\nc"})
    assert diff.count(b"\\ No newline at end of file") == 2
    (h,) = parse_patch(diff, source=SRC).files[0].hunks
    assert h.old_lines == (b"a\n", b"b") and h.new_lines == (b"a\n", b"c")


def test_quoted_non_ascii_path(tmp_path: Path) -> None:
    diff = git_diff(tmp_path, {"tést dir/ü.py": b"1\n"}, {"tést dir/ü.py": b"2\n"})
    assert b'"a/t\\303\\251st dir/\\303\\274.py"' in diff
    (f,) = parse_patch(diff, source=SRC).files
    assert f.old_path == f.new_path == "tést dir/ü.py"


def test_unquoted_path_with_spaces_mode_only() -> None:
    diff = b"diff --git a/my file.sh b/my file.sh\nold mode 100644\nnew mode 100755\n"
    (f,) = parse_patch(diff, source=SRC).files
    assert f.path == "my file.sh" and f.new_mode == "100755"


def test_quote_path_matches_git() -> None:
    assert quote_path("plain/x.py") == "plain/x.py"
    assert quote_path("t\u00e9st") == '"t\\303\\251st"'
    assert quote_path('a"b\\c\td') == '"a\\"b\\\\c\\td"'


# --------------------------------------------------------------------------- header


def test_header_with_format_patch_separator() -> None:
    text = (
        b"Fix the thing.\n\nLonger why.\n---\n vllm/x.py | 2 +-\n 1 file changed\n\n"
        b"diff --git a/vllm/x.py b/vllm/x.py\n--- a/vllm/x.py\n+++ b/vllm/x.py\n"
        b"@@ -1 +1 @@\n-a\n+b\n"
    )
    p = parse_patch(text, source=SRC)
    assert p.header == "Fix the thing.\n\nLonger why.\n---\n vllm/x.py | 2 +-\n 1 file changed"
    assert p.diff.startswith(b"diff --git") and len(p.files) == 1


def test_header_only_is_empty_patch() -> None:
    p = parse_patch("Only words, no diff.\nñ\n\n".encode(), source=SRC)
    assert p.header == "Only words, no diff.\nñ" and p.files == () and p.diff == b""
    assert parse_patch(b"", source=SRC).files == ()


def test_invalid_utf8_header_names_line() -> None:
    with pytest.raises(PatchParseError) as exc:
        parse_patch(b"ok\nbad \xff here\n\ndiff --git a/x b/x\nnew file mode 100644\n", source=SRC)
    assert f"{SRC} line 2" in str(exc.value) and "UTF-8" in str(exc.value)


def test_format_patch_canonical_and_roundtrip(tmp_path: Path) -> None:
    diff = git_diff(tmp_path, {"x": b"1\n"}, {"x": b"2\n"})
    data = format_patch("Title\n\nBody  \n\n \n", diff)
    assert data == b"Title\n\nBody\n\n" + diff
    assert format_patch("Title\n\nBody", diff) == data
    p = parse_patch(data, source=SRC)
    assert p.header == normalise_header("Title\n\nBody  \n\n \n") == "Title\n\nBody"
    assert p.diff == diff
    assert format_patch(p.header, p.diff) == data
    assert format_patch("", diff) == diff
    assert format_patch("  \n", b"") == b""
    assert parse_patch(format_patch("Just text", b""), source=SRC).header == "Just text"


@given(
    header=st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r"), max_size=60
    )
)
def test_format_parse_header_roundtrip_property(header: str) -> None:
    diff = b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
    # A header line that itself starts a diff is not a header any more.
    lines = header.split("\n")
    if any(ln.startswith(("diff --git ", "--- ")) for ln in lines):
        return
    p = parse_patch(format_patch(header, diff), source=SRC)
    assert p.header == normalise_header(header)
    assert p.diff == diff


# --------------------------------------------------------------------------- plain diffs


def test_plain_unified_diff_p1() -> None:
    text = (
        b"Index: linux/x.c\n===================================================================\n"
        b"--- linux.orig/x.c\t2024-01-01 00:00:00.000000000 +0000\n"
        b"+++ linux/x.c\t2024-01-02 00:00:00.000000000 +0000\n"
        b"@@ -1,2 +1,2 @@\n a\n-b\n+c\n"
    )
    p = parse_patch(b"Quilt header\n\n" + text, source=SRC)
    assert p.header == "Quilt header"
    (f,) = p.files
    assert f.old_path == f.new_path == "x.c" and f.raw == text and f.old_mode is None


def test_plain_unified_diff_p0_and_dev_null() -> None:
    text = (
        b"--- vllm/x.py\n+++ vllm/x.py\n@@ -1 +1 @@\n-a\n+b\n"
        b"--- /dev/null\n+++ b/vllm/new.py\n@@ -0,0 +1 @@\n+n\n"
        b"--- a/vllm/gone.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-g\n"
    )
    x, new, gone = parse_patch(text, source=SRC).files
    assert x.old_path == x.new_path == "vllm/x.py"
    assert new.old_path is None and new.new_path == "vllm/new.py"
    assert gone.old_path == "vllm/gone.py" and gone.new_path is None
    assert b"".join(f.raw for f in (x, new, gone)) == text


def test_plain_diff_epoch_timestamp_means_missing_file() -> None:
    text = (
        b"--- a/new.c\t1970-01-01 00:00:00.000000000 +0000\n"
        b"+++ b/new.c\t2024-01-02 00:00:00.000000000 +0000\n@@ -0,0 +1 @@\n+x\n"
        b"--- a/top.c\t2024-01-01 00:00:00.000000000 +0000\n"
        b"+++ b/top.c\t2024-01-02 00:00:00.000000000 +0000\n@@ -0,0 +1 @@\n+x\n"
    )
    new, top = parse_patch(text, source=SRC).files
    assert new.old_path is None and new.new_path == "new.c"
    # -U0 insertion at the top of an existing file: not a creation.
    assert top.old_path == top.new_path == "top.c"


def test_plain_diff_from_diff_u_with_diff_line() -> None:
    text = b"diff -u a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
    p = parse_patch(b"hdr\n" + text, source=SRC)
    assert p.header == "hdr" and p.files[0].raw == text


def test_signature_and_blank_lines_after_diff_are_tolerated() -> None:
    text = b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n-- \n2.39.5\n\n"
    (f,) = parse_patch(text, source=SRC).files
    assert f.added == 1 and f.raw == text


def test_empty_line_in_hunk_is_blank_context() -> None:
    text = b"--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n\n-b\n+c\n"
    (h,) = parse_patch(text, source=SRC).files[0].hunks
    assert h.old_lines == (b"a\n", b"\n", b"b\n")


# --------------------------------------------------------------------------- bad input

GOOD_HEAD = b"Description\n\ndiff --git a/vllm/x.py b/vllm/x.py\n--- a/vllm/x.py\n+++ b/vllm/x.py\n"


def _parse_error(data: bytes) -> str:
    with pytest.raises(PatchParseError) as exc:
        parse_patch(data, source=SRC)
    return str(exc.value)


def test_truncated_hunk() -> None:
    msg = _parse_error(GOOD_HEAD + b"@@ -10,7 +10,8 @@ def f():\n a\n b\n-c\n+C\n+D\n d\n e\n")
    assert f"{SRC} line 13:" in msg
    assert "@@ -10,7 +10,8 @@ of vllm/x.py ends after 5 of 7 old lines (truncated patch?)" in msg
    assert "tip:" in msg


def test_truncated_hunk_before_next_section() -> None:
    msg = _parse_error(GOOD_HEAD + b"@@ -1,3 +1,3 @@\n a\n-b\n+c\ndiff --git a/y b/y\n")
    assert f"{SRC} line 10:" in msg and "ends after 2 of 3 old lines" in msg


def test_wrong_counts_too_many_lines() -> None:
    msg = _parse_error(GOOD_HEAD + b"@@ -1,2 +1,2 @@\n a\n-b\n+c\n d\n e\n")
    assert f"{SRC} line 10:" in msg and "more lines than its header counts" in msg


def test_garbage_line_in_hunk() -> None:
    msg = _parse_error(GOOD_HEAD + b"@@ -1,3 +1,3 @@\n a\nGARBAGE\n-b\n+c\n d\n")
    assert f"{SRC} line 8:" in msg and "'GARBAGE'" in msg and "vllm/x.py" in msg


def test_missing_plus_plus_plus_after_minus_minus_minus() -> None:
    msg = _parse_error(b"diff --git a/x b/x\n--- a/x\n@@ -1 +1 @@\n-a\n+b\n")
    assert f"{SRC} line 3:" in msg and "'+++'" in msg
    msg = _parse_error(b"header\n--- a/x\n@@ -1 +1 @@\n-a\n+b\n")
    assert f"{SRC} line 3:" in msg and "'+++'" in msg


def test_bad_hunk_header() -> None:
    msg = _parse_error(GOOD_HEAD + b"@@ -1,x +1 @@\n")
    assert f"{SRC} line 6:" in msg and "bad hunk header" in msg


def test_unknown_git_header_line() -> None:
    msg = _parse_error(b"diff --git a/x b/x\nwhat is this\n--- a/x\n+++ b/x\n")
    assert f"{SRC} line 2:" in msg


@given(st.binary(max_size=300))
def test_arbitrary_bytes_only_raise_parse_errors(data: bytes) -> None:
    try:
        parse_patch(data, source=SRC)
    except PatchParseError as exc:
        assert SRC in str(exc)


@given(
    st.lists(
        st.sampled_from(
            [
                b"diff --git a/x b/x\n",
                b"--- a/x\n",
                b"+++ b/x\n",
                b"@@ -1,2 +1,2 @@\n",
                b"@@ -0,0 +1 @@\n",
                b" ctx\n",
                b"-old\n",
                b"+new\n",
                b"\\ No newline at end of file\n",
                b"\n",
                b"new file mode 100644\n",
                b"index 0000000..1234567\n",
                b"GIT binary patch\n",
                b'rename from "q\\303"\n',
                b"-- \n",
                b'diff --git "a/b\n',
                b"Binary files a/x and b/x differ\n",
                b"old mode 1\n",
                b"@@ -1 +1 @@",
            ]
        ),
        max_size=25,
    )
)
def test_shuffled_diff_lines_only_raise_parse_errors(chunks: list[bytes]) -> None:
    try:
        p = parse_patch(b"".join(chunks), source=SRC)
    except PatchParseError as exc:
        assert SRC in str(exc)
    else:
        assert p.diff == b"".join(chunks)[len(b"".join(chunks)) - len(p.diff) :]
        assert b"".join(f.raw for f in p.files) == p.diff


# --------------------------------------------------------------------------- path safety

UNSAFE = [
    "/etc/passwd",
    "../x",
    "a/../../x",
    ".git/config",
    ".GIT/hooks/x",
    "sub/.git/x",
    "x\\y",
    ".git./x",
    ".git /x",
    ".Git/config",
    "git~1/config",
    ".git::$INDEX_ALLOCATION/x",
    ".g\u200cit/config",
    "a//b",
    "a/./b",
    "a/",
    "",
    "a\0b",
    "C:/x",
]


@pytest.mark.parametrize("path", UNSAFE)
def test_check_path_refuses(path: str) -> None:
    with pytest.raises(PathSafetyError) as exc:
        check_path(path, source=SRC)
    assert SRC in str(exc.value) and repr(path) in str(exc.value)


@pytest.mark.parametrize(
    "path", ["vllm/x.py", ".github/workflows/ci.yml", "a/.gitignore", "..x/y", "a.git/b", "x..y"]
)
def test_check_path_accepts(path: str) -> None:
    check_path(path, source=SRC)


@pytest.mark.parametrize(
    "diff_path",
    [
        b"/etc/passwd",
        b"../x",
        b"a/../../x",
        b".git/config",
        b".GIT/hooks/x",
        b"sub/.git/x",
        b"x\\y",
        b".git./x",
    ],
)
def test_check_paths_on_parsed_patch(diff_path: bytes) -> None:
    # Names as a hostile patch would write them, after the a/ b/ prefixes.
    text = (
        b"diff --git a/" + diff_path + b" b/" + diff_path + b"\n"
        b"--- a/" + diff_path + b"\n+++ b/" + diff_path + b"\n@@ -1 +1 @@\n-a\n+b\n"
    )
    p = parse_patch(text, source=SRC)
    with pytest.raises(PathSafetyError) as exc:
        check_paths(p)
    assert SRC in str(exc.value) and repr(diff_path.decode()) in str(exc.value)


def test_check_paths_sees_rename_source() -> None:
    text = (
        b"diff --git a/ok b/ok\nsimilarity index 100%\nrename from ../../etc/shadow\nrename to ok\n"
    )
    with pytest.raises(PathSafetyError, match="etc/shadow"):
        check_paths(parse_patch(text, source=SRC))


# --------------------------------------------------------------------------- unidiff


def test_hunk_bytes_survive_the_latin1_detour_through_unidiff() -> None:
    # Invalid UTF-8, CR, form feed and the bytes str.splitlines() would break at
    # (\x1c-\x1e, \x85 once decoded as latin-1) must come back byte for byte.
    odd = b"\xff\xfe bad utf-8 \x0c feed \x1c\x1d\x1e \x85 \xe2\x80\xa8 end\r\n"
    text = b"--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n " + odd + b"-old\r\n+" + odd
    (h,) = parse_patch(text, source=SRC).files[0].hunks
    assert h.old_lines == (odd, b"old\r\n")
    assert h.new_lines == (odd, odd)
    assert [ln.kind for ln in h.lines] == [" ", "-", "+"]


def test_any_trailing_backslash_line_is_a_no_newline_marker() -> None:
    # unidiff recognises a marker after the last counted line only in English.
    text = (
        b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n\\ Kein Zeilenumbruch am Dateiende.\n"
        b"+b\n\\ No newline at end of file\n@@ -5 +5 @@\n-c\n+d\n"
    )
    h1, h2 = parse_patch(text, source=SRC).files[0].hunks
    assert h1.old_lines == (b"a",) and h1.new_lines == (b"b",)
    assert h2.old_lines == (b"c\n",) and h2.new_lines == (b"d\n",)


def test_misplaced_no_newline_markers_are_still_refused() -> None:
    # unidiff takes a "\" line anywhere in a hunk; our validator does not.
    msg = _parse_error(GOOD_HEAD + b"@@ -1 +1 @@\n\\ No newline at end of file\n-a\n+b\n")
    assert f"{SRC} line 7:" in msg and "misplaced" in msg
    msg = _parse_error(
        GOOD_HEAD + b"@@ -1 +1 @@\n-a\n\\ No newline at end of file\n\\ No newline\n+b\n"
    )
    assert f"{SRC} line 9:" in msg and "misplaced" in msg


def test_empty_hunk_does_not_swallow_the_next_one() -> None:
    # Fed whole, unidiff reads one line past a 0,0 hunk; each hunk goes in alone.
    text = b"--- a/x\n+++ b/x\n@@ -1,0 +1,0 @@\n@@ -3 +3 @@\n-a\n+b\n"
    h1, h2 = parse_patch(text, source=SRC).files[0].hunks
    assert h1.lines == () and h2.old_lines == (b"a\n",)


@pytest.mark.parametrize(
    "exc", [RuntimeError("boom"), ValueError("bad"), None], ids=["runtime", "value", "parse"]
)
def test_unidiff_failures_become_parse_errors(
    monkeypatch: pytest.MonkeyPatch, exc: Exception | None
) -> None:
    import unidiff

    import forkpatch.patchfile.hunks as hunks_module

    def broken(_lines: object) -> object:
        raise exc if exc is not None else unidiff.UnidiffParseError("Hunk is longer than expected")

    monkeypatch.setattr(hunks_module, "PatchSet", broken)
    msg = _parse_error(GOOD_HEAD + b"@@ -1 +1 @@\n-a\n+b\n")
    assert f"{SRC} line 6:" in msg and "unidiff cannot parse hunk @@ -1 +1 @@ of vllm/x.py" in msg


def test_unidiff_reading_a_hunk_differently_is_a_parse_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import unidiff

    import forkpatch.patchfile.hunks as hunks_module

    real = unidiff.PatchSet

    def shifted(lines: list[str]) -> object:
        patched = real(lines)
        patched[0][0].source_start += 1
        return patched

    monkeypatch.setattr(hunks_module, "PatchSet", shifted)
    msg = _parse_error(GOOD_HEAD + b"@@ -1 +1 @@\n-a\n+b\n")
    assert f"{SRC} line 6:" in msg and "differently" in msg


def _b85_lines(raw: bytes) -> list[str]:
    """git's binary-patch lines for ``raw`` (already compressed)."""
    out = []
    for i in range(0, len(raw), 52):
        chunk = raw[i : i + 52]
        n = len(chunk)
        letter = chr(ord("A") + n - 1) if n <= 26 else chr(ord("a") + n - 27)
        pad = chunk + b"\0" * (-n % 4)
        out.append(letter + base64.b85encode(pad).decode())
    return out


def _binary_patch(kind_size: str, lines: list[str]) -> bytes:
    return (
        "diff --git a/blob.bin b/blob.bin\nindex 1111111..2222222 100644\nGIT binary patch\n"
        f"{kind_size}\n" + "\n".join(lines) + "\n\nliteral 0\nHcmV?d00001\n\n"
    ).encode()


def test_a_sound_binary_block_parses():
    data = b"\x00\x01binary\xff" * 10
    patch = parse_patch(
        _binary_patch(f"literal {len(data)}", _b85_lines(zlib.compress(data))), source="x.patch"
    )
    assert patch.files[0].is_binary


@pytest.mark.parametrize(
    "case",
    ["bad-length-letter", "bad-base85", "truncated-zlib", "wrong-size", "bomb", "bad-header"],
)
def test_a_damaged_binary_block_is_an_error_of_the_file_at_its_line(case):
    """Not a conflict at apply time (exit 3): a parse error naming the line (exit 1)."""
    data = b"\x00\x01binary\xff" * 10
    good = _b85_lines(zlib.compress(data))
    kind_size, lines = f"literal {len(data)}", good
    if case == "bad-length-letter":
        lines = ["!" + good[0][1:], *good[1:]]
    elif case == "bad-base85":
        lines = [good[0][:1] + "\x7f" * (len(good[0]) - 1), *good[1:]]
    elif case == "truncated-zlib":
        lines = _b85_lines(zlib.compress(data)[:-6])
    elif case == "wrong-size":
        kind_size = f"literal {len(data) + 5}"
    elif case == "bomb":  # says 10 bytes, inflates to 64 MiB: refused without inflating it all
        lines = _b85_lines(zlib.compress(b"\0" * (64 << 20), 9))
        kind_size = "literal 10"
    elif case == "bad-header":
        kind_size = "literally 5"
    with pytest.raises(PatchParseError) as exc:
        parse_patch(_binary_patch(kind_size, lines), source="x.patch")
    assert "x.patch line 4" in exc.value.message, exc.value.message


def test_quilt_created_and_deleted_files_are_read_at_the_file_level() -> None:
    """quilt (-p1, pkg.orig/ and pkg/) names a created file ``--- /dev/null`` ``+++
    pkg/new`` and a deleted one ``--- pkg.orig/old`` ``+++ /dev/null``: read at the
    level of the file's sections with two names, as quilt push applies them."""
    stamp = b"\t1970-01-01 00:00:00.000000000 +0000"
    text = (
        b"Index: pkg/Makefile\n" + b"=" * 67 + b"\n"
        b"--- pkg.orig/Makefile" + stamp + b"\n+++ /dev/null" + stamp + b"\n"
        b"@@ -1 +0,0 @@\n-all:\n"
        b"Index: pkg/src/x.c\n" + b"=" * 67 + b"\n"
        b"--- pkg.orig/src/x.c\n+++ pkg/src/x.c\n@@ -1 +1 @@\n-a\n+b\n"
        b"Index: pkg/src/new.h\n" + b"=" * 67 + b"\n"
        b"--- /dev/null" + stamp + b"\n+++ pkg/src/new.h\n@@ -0,0 +1 @@\n+n\n"
    )
    gone, x, new = parse_patch(text, source=SRC).files
    assert gone.old_path == "Makefile" and gone.new_path is None
    assert x.path == "src/x.c"
    assert new.old_path is None and new.new_path == "src/new.h"
