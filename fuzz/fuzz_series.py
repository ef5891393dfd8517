"""atheris target: parse any bytes as series.yaml.

Run: ``python fuzz/fuzz_series.py -max_total_time=60 [corpus_dir]``. Every input must
end in a valid ``Series`` (which then dumps to text that parses back to the same
series) or a ``SeriesError``; anything else is a bug.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import atheris
from fuzzkit import fuzz

with atheris.instrument_imports(include=["forkpatch"]):
    from forkpatch.errors import SeriesError
    from forkpatch.series import dump_series, load_series, parse_series

_DIR = Path(tempfile.mkdtemp(prefix="fuzz-series-"))
SEEDS = [
    b"version: 1\nfork: {name: f, url: /x}\nbase: {tag: v1, commit: " + b"a" * 40 + b"}\n",
    b"a: &a [x, *a]\n",
    b"fork: {name: f, name: g}\n",
    (
        b"version: 1\nfork: {name: f, url: /x}\nbase: {tag: 1.2, commit: x}\npatches:\n"
        b"  - {name: p, file: ../p.patch, summary: s, colour: red}\n"
    ),
]


def test_one_input(data: bytes) -> None:
    try:
        if data[:1] == b"\xff":  # now and then through the file reader (UTF-8 check)
            path = _DIR / "series.yaml"
            path.write_bytes(data[1:])
            series = load_series(path)
        else:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                return  # a file is read as strict UTF-8: the reader path above covers it
            series = parse_series(text)
    except SeriesError:
        return
    text = dump_series(series)
    again = parse_series(text)
    assert again.patches == tuple(
        p.__class__(**{**p.__dict__, "line": q.line})
        for p, q in zip(series.patches, again.patches, strict=True)
    )
    assert again.base == series.base and again.fork == series.fork


def main() -> None:
    fuzz(test_one_input, "series.yaml", SEEDS)


if __name__ == "__main__":
    main()
