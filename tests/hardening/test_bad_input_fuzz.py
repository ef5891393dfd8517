"""Patch files and series.yaml under property-based fuzzing (hypothesis) and atheris.

Every input ends in success or a ForkpatchError with a message: never another
exception, never a hang (each example runs under a deadline). The rows of
docs/reliability.md are RELIABILITY below.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forkpatch.applier import HunkFailed, apply_file_patch
from forkpatch.errors import ForkpatchError, SeriesError
from forkpatch.patchfile import check_paths, format_patch, parse_patch
from forkpatch.series import dump_series, load_series, parse_series
from support import REPO_ROOT
from support.reliability import Row

EXAMPLES = int(os.environ.get("FORKPATCH_HYPOTHESIS_EXAMPLES", "300"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    # A hang is what the deadline catches; 10 s keeps a loaded 2-core CI box (where
    # one example took over 2 s once) from failing on timing alone.
    deadline=10_000,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)
REPO = REPO_ROOT

# ----------------------------------------------------------------------------- patch text

LINE_KINDS = [
    b" ",
    b"+",
    b"-",
    b"",
    b"\\ No newline at end of file",
    b"@@ -1 +1 @@",
    b"diff --git a/x b/x",
    b"--- a/x",
    b"+++ b/x",
    b"GIT binary patch",
    b"literal 3",
    b"index 0123456..89abcde 100644",
    b"new file mode 100644",
    b"deleted file mode 100644",
    b"rename from x",
    b"rename to ../y",
    b"similarity index 90%",
    b"Binary files a/x and b/x differ",
    b"-- ",
]


@st.composite
def line(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(LINE_KINDS))
    body = draw(
        st.one_of(
            st.binary(max_size=20),
            st.text(max_size=20).map(lambda t: t.encode("utf-8", "surrogatepass")),
            st.sampled_from([b"\xff\xfe", b"\xc3", b"\x00", b"\r", b"x" * 70_000]),  # giant line
        )
    )
    end = draw(st.sampled_from([b"\n", b"\r\n", b"\n", b""]))
    return kind + body + end


@st.composite
def hunk(draw: st.DrawFn) -> bytes:
    """A hunk whose @@ counts may lie about its body."""
    old_start = draw(st.integers(0, 50))
    new_start = draw(st.integers(0, 50))
    old_len = draw(st.integers(0, 6))
    new_len = draw(st.integers(0, 6))
    body = draw(
        st.lists(
            st.tuples(
                st.sampled_from([b" ", b"-", b"+", b"\\", b""]),
                st.sampled_from([b"a", b"b", b"c", b"line", b""]),
                st.sampled_from([b"\n", b"\r\n"]),
            ),
            max_size=10,
        )
    )
    text = f"@@ -{old_start},{old_len} +{new_start},{new_len} @@\n".encode()
    for kind, word, end in body:
        if kind == b"\\":
            text += b"\\ No newline at end of file\n"
        else:
            text += kind + word + end
    return text


@st.composite
def patch_text(draw: st.DrawFn) -> bytes:
    header = draw(st.sampled_from([b"", b"Describe it.\n\n", b"\xff bad utf-8\n\n"]))
    a = draw(
        st.sampled_from(
            ["x.py", "vllm/x.py", "../x", "/etc/x", ".git/config", "a b", '"q\\tx"', "dev/null"]
        )
    )
    sections = []
    for _ in range(draw(st.integers(1, 3))):
        head = draw(
            st.sampled_from(
                [
                    f"diff --git a/{a} b/{a}\n--- a/{a}\n+++ b/{a}\n".encode(),
                    f"--- {a}.orig\n+++ {a}\n".encode(),
                    f"diff --git a/{a} b/{a}\nnew file mode 100644\n--- /dev/null\n+++ b/{a}\n".encode(),
                    f"diff --git a/{a} b/{a}\ndeleted file mode 100644\n--- a/{a}\n+++ /dev/null\n".encode(),
                    f"diff --git a/{a} b/{a}\nindex 0000000..1111111\nGIT binary patch\nliteral 1\n".encode(),
                ]
            )
        )
        hunks = b"".join(draw(st.lists(hunk(), min_size=0, max_size=3)))
        junk = b"".join(draw(st.lists(line(), max_size=3)))
        sections.append(head + hunks + junk)
    text = header + b"".join(sections)
    cut = draw(st.integers(0, len(text)))
    if draw(st.booleans()):
        text = text[:cut]  # truncated file
    if draw(st.booleans()):
        text = text.replace(b"\n", b"\r\n", draw(st.integers(0, 5)))  # CRLF mix
    return text


def _parse_and_apply(text: bytes, original: bytes | None, fuzz: int) -> str:
    start = time.monotonic()
    try:
        patch = parse_patch(text, source="fuzz.patch")
        check_paths(patch)
    except ForkpatchError as exc:
        assert exc.message.startswith("fuzz.patch"), exc.message  # names the file
        assert "Traceback" not in str(exc)
        return type(exc).__name__
    again = parse_patch(format_patch(patch.header, patch.diff), source="again.patch")
    assert (again.header, again.diff) == (patch.header, patch.diff)
    outcome = "parsed"
    for fp in patch.files:
        try:
            res = apply_file_patch(original, fp, max_fuzz=fuzz)
            assert res.content is None or isinstance(res.content, bytes)
            outcome = "applied"
        except HunkFailed as exc:
            assert exc.reason  # the engine shows it to the user
    assert time.monotonic() - start < 5
    return outcome


@SETTINGS
@given(
    text=patch_text(),
    original=st.one_of(st.none(), st.binary(max_size=200)),
    fuzz=st.integers(0, 3),
)
def test_patch_grammar_fuzz(text: bytes, original: bytes | None, fuzz: int) -> None:
    _parse_and_apply(text, original, fuzz)


@SETTINGS
@given(text=st.binary(max_size=3000), original=st.one_of(st.none(), st.binary(max_size=200)))
def test_patch_random_bytes(text: bytes, original: bytes | None) -> None:
    _parse_and_apply(text, original, 2)


@SETTINGS
@given(
    a=st.lists(st.sampled_from(["a\n", "b\n", "c\r\n", "x" * 200 + "\n", "\n", "z"]), max_size=30),
    b=st.lists(st.sampled_from(["a\n", "b\n", "c\r\n", "d\n", "\n", "z"]), max_size=30),
    n=st.integers(0, 3),
)
def test_real_diffs_apply_exactly(a: list[str], b: list[str], n: int) -> None:
    """A diff made by difflib applies to its old side and gives exactly the new side."""
    old, new = "".join(a), "".join(b)
    if "z" in old[:-1] or "z" in new[:-1]:
        return
    lines = []
    for ln in difflib.unified_diff(old.splitlines(True), new.splitlines(True), "a/f", "b/f", n=n):
        lines.append(ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n")
    if not lines:
        return
    text = ("diff --git a/f b/f\n" + "".join(lines)).encode()
    patch = parse_patch(text, source="real.patch")
    res = apply_file_patch(old.encode(), patch.files[0])
    assert res.content == new.encode()


# ----------------------------------------------------------------------------- series.yaml

COMMIT = "a" * 40
VALID = f"""version: 1
fork: {{name: f, url: /x}}
base: {{tag: v1, commit: "{COMMIT}"}}
patches:
  - name: p
    file: p.patch
    summary: s
"""

YAML_PIECES = [
    "colour: red\n",  # unknown key
    "version: 2\n",
    "version: \n",
    "version: [1]\n",
    "version: true\n",
    "fork: {name: f, name: g, url: /x}\n",  # duplicate key
    "fork: [1, 2]\n",
    "base: {tag: 1.2, commit: x}\n",
    "base: {tag: v1, commit: 12}\n",
    f'base: {{tag: v1, commit: "{COMMIT}", extra: 1}}\n',
    "patches: 3\n",
    "patches: [{name: P Q, file: x, summary: s}]\n",
    "patches: [{name: p, file: ../../etc/passwd, summary: s}]\n",
    "patches: [{name: p, file: /abs.patch, summary: s}]\n",
    "patches: [{name: p, build-step: nope, summary: s}]\n",
    "patches: [{name: p, file: a.patch, build-step: vllm-dist-info, summary: s}]\n",
    "patches: [{name: p, file: a.patch, summary: s}, {name: p, file: b.patch, summary: s}]\n",
    "patches: [{name: p, file: a.patch, summary: s, smoke: notalist}]\n",
    "a: &a [x, x, x]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\n",  # alias bomb
    "a: &a {k: *a}\n",
    "a: !!python/object:os.system ls\n",
    "a: !!binary zz\n",
    "base: {tag: 2001-13-45, commit: x}\n",
    "build: {max-jobs: yes}\n",
    "track: {min-age-days: .nan}\n",
    "build: {mode: }\n",
    "{? [a]: b}\n",
    "- a\n",
    "\t bad indent\n",
    "'unterminated\n",
    "--- \n...\n--- \n",
    "\ufeffversion: 1\n",
]


@SETTINGS
@given(
    pieces=st.lists(st.sampled_from(YAML_PIECES), max_size=4),
    keep=st.booleans(),
    cut=st.integers(0, 400),
)
def test_series_yaml_fuzz(pieces: list[str], keep: bool, cut: int) -> None:
    text = (VALID if keep else "") + "".join(pieces)
    if cut < len(text) and not keep:
        text = text[:cut]
    start = time.monotonic()
    try:
        series = parse_series(text)
    except SeriesError as exc:
        assert re.match(r"series\.yaml(:\d+)?: ", exc.message), exc.message  # names the line
    else:
        assert parse_series(dump_series(series)).names() == series.names()
    assert time.monotonic() - start < 2  # an alias bomb is refused, not expanded


@SETTINGS
@given(data=st.binary(max_size=600))
def test_series_random_bytes(data: bytes, tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("s") / "series.yaml"
    path.write_bytes(data)
    try:
        load_series(path)
    except SeriesError as exc:
        assert exc.message.startswith((str(path), "series.yaml")), exc.message  # the file


def test_billion_laughs_is_refused_fast() -> None:
    bomb = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for i in range(1, 10):
        prev = chr(ord("a") + i - 1)
        cur = chr(ord("a") + i)
        bomb += f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]\n"
    start = time.monotonic()
    with pytest.raises(SeriesError, match=r"alias|anchor"):
        parse_series(bomb)
    assert time.monotonic() - start < 1


# ----------------------------------------------------------------------------- atheris

FUZZ_SECONDS = int(os.environ.get("FORKPATCH_FUZZ_SECONDS", "20"))


@pytest.mark.slow  # FUZZ_SECONDS of fuzzing each
@pytest.mark.parametrize("target", ["fuzz_patchfile", "fuzz_series"])
def test_atheris_target(target: str, tmp_path: Path) -> None:
    """Each atheris target for a bounded time (FORKPATCH_FUZZ_SECONDS, default 20)."""
    pytest.importorskip("atheris", reason="atheris is not installed (pip install atheris)")
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "fuzz" / f"{target}.py"),
            f"-max_total_time={FUZZ_SECONDS}",
            "-print_final_stats=1",
            f"-artifact_prefix={tmp_path}/",
            "-rss_limit_mb=2048",
            "-timeout=10",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        timeout=FUZZ_SECONDS + 120,
        check=False,
    )
    crashes = sorted(
        p.name for p in tmp_path.iterdir() if p.name.startswith(("crash-", "timeout-", "oom-"))
    )
    assert proc.returncode == 0 and not crashes, proc.stdout[-4000:]
    m = re.search(r"stat::number_of_executed_units: (\d+)", proc.stdout)
    assert m is not None and int(m.group(1)) > 0, proc.stdout[-2000:]


RELIABILITY = [
    Row(
        "bad input: patch files",
        "grammar-shaped patch files (hypothesis)",
        f"{EXAMPLES} inputs",
        "each parses to a patch that round-trips and applies or fails with a hunk reason, "
        "or is a ForkpatchError naming the file; never another exception, never over 5 s",
    ),
    Row(
        "bad input: patch files",
        "random bytes as a patch file (hypothesis)",
        f"{EXAMPLES} inputs",
        "the same",
    ),
    Row(
        "bad input: patch files",
        "diffs made by difflib (hypothesis)",
        f"{EXAMPLES} inputs",
        "each applies to its old side and gives exactly the new side",
    ),
    Row(
        "bad input: patch files",
        "atheris fuzz_patchfile (libFuzzer)",
        f"{FUZZ_SECONDS} s",
        "no crash, hang or out-of-memory (skipped where atheris is absent)",
    ),
    Row(
        "bad input: series.yaml",
        f"series.yaml from {len(YAML_PIECES)} hostile pieces (hypothesis)",
        f"{EXAMPLES} inputs",
        "each loads and round-trips, or is a SeriesError naming series.yaml and the line; "
        "alias bombs refused in under 2 s",
    ),
    Row(
        "bad input: series.yaml",
        "random bytes as series.yaml (hypothesis)",
        f"{EXAMPLES} inputs",
        "each loads or is a SeriesError naming the file",
    ),
    Row(
        "bad input: series.yaml",
        "atheris fuzz_series (libFuzzer)",
        f"{FUZZ_SECONDS} s",
        "no crash, hang or out-of-memory (skipped where atheris is absent)",
    ),
]
