"""series.yaml's kept parse (forkpatch.seriescache): taken only for exactly the text it
was made from, with the same code; anything else is parsed in full, with the parser's
errors (file and line) as they are without it."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forkpatch import seriescache
from forkpatch.errors import SeriesError
from forkpatch.fsutil import dump_state
from forkpatch.project import Project
from forkpatch.series import PatchEntry, parse_series
from support import REPO_ROOT
from support.cli import env

C = "a" * 40
HEAD = f"# a comment\n\nversion: 1\nfork:\n  name: f\n  url: /x\nbase:\n  tag: v1\n  commit: {C}\n"
ENTRIES = (
    "patches:\n"
    "  - name: one\n    file: one.patch\n    summary: the first\n"
    "    why: |\n      two\n      lines\n    upstream-commits: [abcdef1]\n"
    "    smoke: [static.cli-version]\n"
    "    drop-when:\n      text: never\n      upstreamed: true\n"
    "  - name: two\n    build-step: vllm-dist-info\n    summary: a step\n"
)
SHAPES = {
    "no patches": HEAD + "patches: []\n",
    "entries": HEAD + ENTRIES,
    "build section": HEAD + ENTRIES + "build:\n  mode: overlay\n  max-jobs: 4\n",
    "team checks": HEAD
    + "smoke:\n  checks:\n    static.ours:\n      pytest: tests/t.py::test_x\n"
    + "patches:\n  - name: a\n    file: a.patch\n    summary: s\n    smoke: [static.ours]\n",
    "the repository's series": (REPO_ROOT / "series.yaml").read_text(encoding="utf-8"),
}


def project_with(tmp_path: Path, text: str) -> Path:
    root = tmp_path / "project"
    (root / ".forkpatch").mkdir(parents=True, exist_ok=True)
    (root / "series.yaml").write_text(text, encoding="utf-8")
    return root


def read(root: Path):
    return Project(root=root).series


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_kept_parse_is_the_parse_of_the_same_text(tmp_path, shape):
    text = SHAPES[shape]
    root = project_with(tmp_path, text)
    first = read(root)
    assert first == parse_series(text)
    kept = root / ".forkpatch" / seriescache.CACHE_FILE
    assert kept.is_file(), "a valid series is kept"
    again = seriescache.cached_series(text.encode(), root / ".forkpatch")
    assert again == first
    assert [p.line for p in again.patches] == [p.line for p in first.patches]
    assert again.header_comment == first.header_comment


def test_a_command_reading_a_kept_parse_loads_no_yaml(tmp_path):
    root = project_with(tmp_path, SHAPES["the repository's series"])
    read(root)
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from forkpatch.project import Project\n"
        "s = Project(root=Path(sys.argv[1])).series\n"
        "print(json.dumps([len(s.patches), 'yaml' in sys.modules,"
        " 'forkpatch.sections' in sys.modules]))\n"
    )
    got = subprocess.run(
        [sys.executable, "-c", code, str(root)], env=env(), capture_output=True, text=True
    )
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == [6, False, False]


@pytest.mark.parametrize(
    "change",
    [
        lambda t: t.replace("the first", "the first!"),
        lambda t: t.replace("# a comment", "# another comment"),
        lambda t: t + "\n",
        lambda t: t.replace("  - name: two", "  - name: three"),
        lambda t: t.replace("      lines\n", "      lines\n\n"),
    ],
)
def test_another_text_is_parsed_again(tmp_path, change):
    text = HEAD + ENTRIES
    root = project_with(tmp_path, text)
    read(root)
    new = change(text)
    assert new != text
    (root / "series.yaml").write_text(new, encoding="utf-8")
    assert seriescache.cached_series(new.encode(), root / ".forkpatch") is None
    assert read(root) == parse_series(new)


@pytest.mark.parametrize(
    "edit, where",
    [
        (lambda t: t.replace("    summary: a step\n", "    summary: a step\n    summary: b\n"), 25),
        (lambda t: t.replace("name: two", "name: Two"), 22),
        (lambda t: t.replace("  - name: one\n", "  - name: one\n    bogus: 1\n"), 12),
        (lambda t: t.replace("version: 1", "version: 2"), 3),
    ],
)
def test_an_error_after_a_kept_parse_names_its_line(tmp_path, edit, where):
    """The kept parse of the text before never stands in for a text with an error."""
    text = HEAD + ENTRIES
    root = project_with(tmp_path, text)
    read(root)
    bad = edit(text)
    with pytest.raises(SeriesError) as direct:
        parse_series(bad)
    (root / "series.yaml").write_text(bad, encoding="utf-8")
    with pytest.raises(SeriesError) as caught:
        read(root)
    assert caught.value.message == direct.value.message
    assert caught.value.message.startswith(f"series.yaml:{where}:"), caught.value.message


def _forged(data: dict) -> bytes:
    return dump_state("series-parsed", 1, data)


@pytest.mark.parametrize(
    "garble",
    [
        lambda raw, doc: raw[: len(raw) // 2],  # cut short
        lambda raw, doc: raw.replace(b'"the first"', b'"the worst"'),  # checksum no longer holds
        lambda raw, doc: b"\xff\xfe not json",
        lambda raw, doc: _forged({**doc, "code": [["another parser"]]}),  # stale code
        lambda raw, doc: _forged({**doc, "series": {**doc["series"], "version": "1"}}),
        lambda raw, doc: _forged({**doc, "series": {**doc["series"], "fork": ["f", "/x"]}}),
        lambda raw, doc: _forged(
            {**doc, "series": {**doc["series"], "patches": [{"name": "one"}]}}
        ),
        lambda raw, doc: _forged(
            {
                **doc,
                "series": {
                    **doc["series"],
                    "patches": [{**doc["series"]["patches"][0], "line": True}],
                },
            }
        ),
        lambda raw, doc: _forged({**doc, "series": {**doc["series"], "sections": {"nope": {}}}}),
        lambda raw, doc: dump_state("status-cache", 1, doc),  # another state file's kind
        lambda raw, doc: dump_state("series-parsed", 99, doc),
    ],
)
def test_a_garbled_or_stale_kept_parse_is_a_miss(tmp_path, garble):
    text = HEAD + ENTRIES
    root = project_with(tmp_path, text)
    read(root)
    kept = root / ".forkpatch" / seriescache.CACHE_FILE
    raw = kept.read_bytes()
    doc = json.loads(raw)["data"]
    kept.write_bytes(garble(raw, doc))
    assert seriescache.cached_series(text.encode(), root / ".forkpatch") is None
    assert read(root) == parse_series(text)
    # ... and the next read keeps a good one again.
    assert seriescache.cached_series(text.encode(), root / ".forkpatch") == parse_series(text)


def test_a_kept_parse_that_is_not_a_regular_file_is_a_miss(tmp_path):
    text = HEAD + ENTRIES
    root = project_with(tmp_path, text)
    read(root)
    kept = root / ".forkpatch" / seriescache.CACHE_FILE
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(kept.read_bytes())
    kept.unlink()
    os.symlink(elsewhere, kept)  # never followed
    assert seriescache.cached_series(text.encode(), root / ".forkpatch") is None
    kept.unlink()
    kept.mkdir()
    assert seriescache.cached_series(text.encode(), root / ".forkpatch") is None
    assert read(root) == parse_series(text)


def test_nothing_is_kept_without_a_state_directory(tmp_path):
    root = tmp_path / "project"
    root.mkdir()
    (root / "series.yaml").write_text(HEAD + ENTRIES, encoding="utf-8")
    assert read(root) == parse_series(HEAD + ENTRIES)
    assert not (root / ".forkpatch").exists()


def test_the_kept_form_holds_every_field_of_an_entry():
    assert list(seriescache.ENTRY_FIELDS) == [f.name for f in dataclasses.fields(PatchEntry)]
    for shape, text in SHAPES.items():
        series = parse_series(text)
        form = json.loads(json.dumps(seriescache.series_to_json(series)))
        assert seriescache.series_from_json(form) == series, shape


def test_the_code_stamp_names_the_parser_modules_and_pyyaml():
    stamp = seriescache.code_stamp()
    names = [row[0] for row in stamp[1:]]
    assert names == [*seriescache.PARSER_MODULES, "yaml"]
    assert all(len(row) == 4 for row in stamp[1:]), "every file found"


def test_nothing_is_kept_for_code_whose_files_are_not_found(tmp_path, monkeypatch):
    """Code that is not in plain files (a zip) has no stamp that changes with it."""
    text = HEAD + ENTRIES
    root = project_with(tmp_path, text)
    read(root)
    assert seriescache.cached_series(text.encode(), root / ".forkpatch") is not None
    monkeypatch.setattr(seriescache, "PARSER_MODULES", (*seriescache.PARSER_MODULES, "nowhere"))
    assert seriescache.cached_series(text.encode(), root / ".forkpatch") is None
    (root / ".forkpatch" / seriescache.CACHE_FILE).unlink()
    assert read(root) == parse_series(text)
    assert not (root / ".forkpatch" / seriescache.CACHE_FILE).exists()
