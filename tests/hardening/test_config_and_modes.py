"""Config values of the wrong type and patch headers git cannot hold fail at load time.

Issue 12, items 13-14: every section of series.yaml (build, smoke, publish, track) is
validated into typed frozen dataclasses when the file loads, with the file, the line
and the key in the message, never as a TypeError later; ``version: true`` and an
all-digit ``base.commit`` get the right message. Unusual file modes (160000, 040000,
100777, ...) and over-long names are refused while the patch is parsed, naming the
patch file and the line, never as a raw error of git's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from forkpatch.errors import SeriesError
from forkpatch.series import parse_series
from support.cli import fp_in
from support.projects import project_with_patches
from support.reliability import Row

C = "a" * 40
HEAD = (
    f"version: 1\nfork:\n  name: f\n  url: /nowhere\nbase:\n  tag: v1\n  commit: {C}\npatches: []\n"
)
# Line numbers below count from the first line of the fragment: HEAD has 8 lines.
FIRST = 9

# fragment, line of the error (1 = the fragment's first line), words the message must hold
BAD_CONFIG: dict[str, tuple[str, int, str]] = {
    "compiled-patterns of numbers": (
        "build:\n  compiled-patterns: [1, 2]\n",
        2,
        "build.compiled-patterns[0] must be a string, got integer 1",
    ),
    "compiled-patterns, a number on its own line": (
        "build:\n  compiled-patterns:\n    - '*.cu'\n    - 2\n",
        4,
        "build.compiled-patterns[1] must be a string",
    ),
    "compiled-patterns a string": (
        "build:\n  compiled-patterns: '*.cu'\n",
        2,
        "build.compiled-patterns must be a list",
    ),
    "max-jobs a boolean": (
        "build:\n  max-jobs: true\n",
        2,
        "build.max-jobs must be a whole number",
    ),
    "max-jobs a string": ("build:\n  max-jobs: '4'\n", 2, "build.max-jobs must be a whole number"),
    "max-jobs zero": ("build:\n  max-jobs: 0\n", 2, "build.max-jobs must be at least 1"),
    "unknown build mode": ("build:\n  mode: fast\n", 2, "build.mode must be one of auto"),
    "arch-list a number": ("build:\n  arch-list: 7.0\n", 2, "build.arch-list must be a string"),
    "cache a list": ("build:\n  cache: [ccache]\n", 2, "build.cache must be a mapping"),
    "unknown cache kind": (
        "build:\n  cache:\n    kind: memcached\n",
        3,
        "build.cache.kind must be one of ccache",
    ),
    "cache volume a number": (
        "build:\n  cache:\n    volume: 3\n",
        3,
        "build.cache.volume must be a string",
    ),
    "dist-dir empty": ("build:\n  dist-dir:\n", 2, "build.dist-dir must be a string"),
    "base-wheel a list": (
        "build:\n  base-wheel: [a.whl]\n",
        2,
        "build.base-wheel must be a string",
    ),
    "misspelt build key": ("build:\n  arch_list: '7.0'\n", 2, "did you mean 'arch-list'"),
    "required tiers a string": (
        "smoke:\n  required-tiers: sm70\n",
        2,
        "smoke.required-tiers must be a list",
    ),
    "unknown required tier": (
        "smoke:\n  required-tiers: [sm80]\n",
        2,
        "smoke.required-tiers[0] must be one of static, gpu, sm70",
    ),
    "smoke python a number": ("smoke:\n  python: 3.12\n", 2, "smoke.python must be a string"),
    "index-url a mapping": ("smoke:\n  index-url: {a: b}\n", 2, "smoke.index-url must be a string"),
    "publish.to a number": ("publish:\n  to: 42\n", 2, "publish.to must be a string"),
    "publish tier a number": (
        "publish:\n  required-tiers: [static, 7]\n",
        2,
        "publish.required-tiers[1] must be a string",
    ),
    "publish a list": ("publish: [x]\n", 1, "publish must be a mapping"),
    "pattern that does not compile": (
        "track:\n  pattern: '(v'\n",
        2,
        "track.pattern is not a valid regular expression",
    ),
    "prereleases a string": ("track:\n  prereleases: 'yes'\n", 2, "track.prereleases must be true"),
    "prereleases a number": ("track:\n  prereleases: 1\n", 2, "track.prereleases must be true"),
    "min-age-days a string": (
        "track:\n  min-age-days: '3'\n",
        2,
        "track.min-age-days must be a number of days",
    ),
    "min-age-days negative": ("track:\n  min-age-days: -1\n", 2, "zero or more days"),
    "min-age-days a boolean": ("track:\n  min-age-days: true\n", 2, "must be a number of days"),
    "bot-branch with an unknown placeholder": (
        "track:\n  bot-branch: 'bot/{nope}'\n",
        2,
        "track.bot-branch is not a branch template",
    ),
    "bot-branch with a broken placeholder": (
        "track:\n  bot-branch: 'bot/{'\n",
        2,
        "track.bot-branch is not a branch template",
    ),
    "branch a list": ("track:\n  branch: [main]\n", 2, "track.branch must be a string"),
}


def _line(fragment_line: int) -> str:
    return f"series.yaml:{FIRST + fragment_line - 1}:"


@pytest.mark.parametrize("variant", sorted(BAD_CONFIG))
def test_a_config_value_of_the_wrong_type_is_refused_on_load(variant: str) -> None:
    fragment, line, words = BAD_CONFIG[variant]
    with pytest.raises(SeriesError) as info:
        parse_series(HEAD + fragment)
    message = str(info.value)
    assert _line(line) in message and words in message, message


@pytest.mark.parametrize("variant", ["compiled-patterns of numbers", "max-jobs a boolean"])
@pytest.mark.parametrize(
    "args", [("build-wheel", "--json"), ("status",), ("track", "--json"), ("smoke", "--bisect")]
)
def test_every_command_reports_it_instead_of_a_type_error(
    tmp_path: Path, variant: str, args: tuple[str, ...]
) -> None:
    fragment, line, words = BAD_CONFIG[variant]
    (tmp_path / "series.yaml").write_text(HEAD + fragment)
    code, _out, err = fp_in(tmp_path, *args)
    assert code == 1, err
    assert _line(line) in err and words in err, err
    assert "internal error" not in err and "TypeError" not in err


BAD_TOP: dict[str, tuple[str, str]] = {
    "version: true": (
        HEAD.replace("version: 1", "version: true"),
        "series.yaml:1: version must be the whole number 1, got boolean true",
    ),
    "version: 1.0": (
        HEAD.replace("version: 1", "version: 1.0"),
        "series.yaml:1: version must be the whole number 1",
    ),
    "version: '1'": (
        HEAD.replace("version: 1", "version: '1'"),
        "series.yaml:1: version must be the whole number 1",
    ),
    "version: 2": (HEAD.replace("version: 1", "version: 2"), "unsupported series format version 2"),
    "commit: 39 digits": (
        HEAD.replace(C, "1" * 39),
        "series.yaml:7: base.commit must be a full 40-hex commit id, got '111",
    ),
    "commit: 41 digits": (HEAD.replace(C, "1" * 41), "base.commit must be a full 40-hex commit id"),
    "commit: digits with _": (
        HEAD.replace(C, "1_" + "2" * 38),
        "base.commit must be a full 40-hex",
    ),
    "commit: a number in exponent form": (
        HEAD.replace(C, "1.5e+39"),
        "base.commit must be a full 40-hex",
    ),
    "commit: true": (HEAD.replace(C, "true"), "base.commit must be a full 40-hex"),
}


@pytest.mark.parametrize("variant", sorted(BAD_TOP))
def test_version_and_commit_get_the_right_message(variant: str) -> None:
    text, words = BAD_TOP[variant]
    with pytest.raises(SeriesError) as info:
        parse_series(text)
    assert words in str(info.value), str(info.value)
    assert "quote it" not in str(info.value)


@pytest.mark.parametrize("commit", ["1234567890" * 4, "0123456701234567012345670123456701234567"])
def test_an_all_digit_commit_id_is_read_as_written(commit: str) -> None:
    from forkpatch.series import dump_series

    series = parse_series(HEAD.replace(C, commit))
    assert series.base.commit == commit
    assert parse_series(dump_series(series)).base.commit == commit


def test_typed_sections_round_trip() -> None:
    fragment = (
        "build:\n  mode: overlay\n  arch-list: '7.0'\n  compiled-patterns: ['*.cu', csrc/*]\n"
        "  cache:\n    kind: sccache\n    max-size: 5G\n  max-jobs: 4\n"
        "smoke:\n  required-tiers: [static, sm70]\n  python: '3.12'\n"
        "publish:\n  to: /srv/wheels\n"
        "track:\n  pattern: '^v(?P<version>.*)$'\n  prereleases: false\n  min-age-days: 2\n"
        "  bot-branch: 'bot/{tag}'\n"
    )
    from forkpatch.series import dump_series

    s = parse_series(HEAD + fragment)
    assert s.build.max_jobs == 4 and s.build.compiled_patterns == ("*.cu", "csrc/*")
    assert s.build.cache is not None and s.build.cache.kind == "sccache"
    assert s.smoke.required_tiers == ("static", "sm70") and s.publish.to == "/srv/wheels"
    assert s.track.min_age_days == 2.0 and s.track.prereleases is False
    assert s.build.cache.as_mapping() == {"kind": "sccache", "max-size": "5G"}
    assert parse_series(dump_series(s)) == s


def test_known_tiers_match_the_smoke_suite() -> None:
    from forkpatch.sections import KNOWN_TIERS
    from forkpatch.smoke.incheck import TIERS

    assert KNOWN_TIERS == TIERS


# ----------------------------------------------------------------------------- 14: modes, names


def _new_file(path: str, mode: str = "100644") -> str:
    return (
        f"diff --git a/{path} b/{path}\nnew file mode {mode}\n--- /dev/null\n+++ b/{path}\n"
        "@@ -0,0 +1 @@\n+x = 1\n"
    )


LONG = "d" * 256
BAD_HEADERS: dict[str, tuple[str, int, str]] = {
    # patch text (after a 2-line description), its offending line, words
    "a new submodule": (_new_file("vllm/sub", "160000"), 2, "mode 160000 is a submodule"),
    "a new directory": (_new_file("vllm/dir", "040000"), 2, "mode 040000 is a directory"),
    "mode 100777": (_new_file("vllm/x.py", "100777"), 2, "mode 100777 is not a git file mode"),
    "mode 100664 (old git)": (_new_file("vllm/x.py", "100664"), 2, "mode 100664"),
    "mode change to 120777": (
        "diff --git a/vllm/x.py b/vllm/x.py\nold mode 100644\nnew mode 120777\n",
        3,
        "mode 120777",
    ),
    "a submodule moved": (
        (
            "diff --git a/vllm/sub b/vllm/sub\nindex 1111111..2222222 160000\n--- a/vllm/sub\n"
            "+++ b/vllm/sub\n@@ -1 +1 @@\n-Subproject commit 1111111\n+Subproject commit 2222222\n"
        ),
        2,
        "mode 160000 is a submodule",
    ),
    "a deleted submodule": (
        (
            "diff --git a/vllm/sub b/vllm/sub\ndeleted file mode 160000\n--- a/vllm/sub\n"
            "+++ /dev/null\n@@ -1 +0,0 @@\n-Subproject commit 1111111\n"
        ),
        2,
        "mode 160000",
    ),
    "a 256-byte file name": (_new_file(f"vllm/{LONG}.py"), 1, "is 259 bytes long"),
    "a 256-byte directory name": (_new_file(f"vllm/{LONG}/x.py"), 1, "is 256 bytes long"),
    "a 5,000-byte path": (
        _new_file("/".join(["p" * 200] * 25) + "/x.py"),
        1,
        "file systems take at most 4095",
    ),
    "a long name in a plain diff": (
        f"--- /dev/null\n+++ b/vllm/{LONG}.py\n@@ -0,0 +1 @@\n+x = 1\n",
        1,
        "bytes long",
    ),
    "a long name in a rename": (
        (
            f"diff --git a/README b/{LONG}\nsimilarity index 100%\nrename from README\n"
            f"rename to {LONG}\n"
        ),
        1,
        "is 256 bytes long",
    ),
    "a long UTF-8 name (86 x 3 bytes)": (_new_file("vllm/" + "€" * 86 + ".py"), 1, "bytes long"),
}


@pytest.mark.parametrize("variant", sorted(BAD_HEADERS))
def test_modes_and_long_names_are_refused_while_parsing(tmp_path: Path, variant: str) -> None:
    text, line, words = BAD_HEADERS[variant]
    project, _fork = project_with_patches(tmp_path, {"vllm/x.py": "x = 0\n", "README": "r\n"}, [])
    incoming = tmp_path / "incoming.diff"
    incoming.write_text("Description.\n\n" + text)
    for args, source in (
        (("import", "--name", "evil", str(incoming)), str(incoming)),
        (("apply",), "patches/evil.patch"),
    ):
        if args == ("apply",):
            (project / "patches" / "evil.patch").write_text("Description.\n\n" + text)
            series = project / "series.yaml"
            series.write_text(
                series.read_text().replace("patches: []\n", "patches:\n")
                + "  - name: evil\n    file: evil.patch\n    summary: evil\n"
            )
        code, _out, err = fp_in(project, *args)
        assert code == 1, err
        assert f"{source} line {line + 2}:" in err and words in err, err
        message = err.split("\n  tip:")[0]  # the tip may well mention git diff
        for leak in ("fatal:", "fast-import", "internal error", "Traceback", "`git "):
            assert leak not in message, err
        assert not (project / ".forkpatch" / "worktree").exists()


RELIABILITY = [
    Row(
        "bad input: series.yaml",
        "build/smoke/publish/track values of the wrong type, range or form",
        f"{len(BAD_CONFIG)} values (+ 2 x 4 commands)",
        "refused on load naming series.yaml:LINE and the key; never a TypeError later",
        refused=str(len(BAD_CONFIG) + 8),
    ),
    Row(
        "bad input: series.yaml",
        "version: true / 1.0 / '1' / 2, base.commit of digits, _ or exponents",
        f"{len(BAD_TOP)} cases (+ 2 all-digit ids read as written)",
        "the right message (never 'quote it' for a value that is no commit id)",
        refused=str(len(BAD_TOP)),
    ),
    Row(
        "bad input: patch files",
        "file modes 160000/040000/100777/100664/120777 and names over 255/4095 bytes",
        f"{len(BAD_HEADERS)} patches x (import, apply)",
        "refused while parsing, naming the patch and the line; no git error, no work tree",
        refused=str(2 * len(BAD_HEADERS)),
    ),
]
