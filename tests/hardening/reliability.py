"""docs/reliability.md from the hardening suite's own case tables.

Each ``tests/hardening/test_*.py`` lists its rows in ``RELIABILITY`` (a :class:`hardkit.Row`
per class of bad input), computed from the tables its tests are parametrized with, so
the figures are the tests'. ``test_reliability_doc.py`` asserts that the document is
what this renders; after adding cases, run

    python tests/hardening/reliability.py          # rewrites docs/reliability.md

The output depends only on those tables (no run-time counts, no dates, no timings).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOC = HERE.parents[1] / "docs" / "reliability.md"

ORDER = [
    "bad input: patch files",
    "bad input: series.yaml",
    "path safety",
    "writes outside the project",
    "interruptions",
    "concurrency",
    "fork moving",
    "secrets",
    "publish gate",
    "hostile wheels",
]

INTRO = """\
# Reliability: bad input, escapes, interruptions, concurrency, secrets, hostile wheels

Generated from the hardening suite (`tests/hardening/`): each test module lists its
rows in `RELIABILITY`, computed from the cases its tests are parametrized with, and
`test_reliability_doc.py` fails when this file does not match them. Rewrite it with
`python tests/hardening/reliability.py`. Do not edit by hand.

Every case asserts its outcome (a failing case fails the suite; nothing is only
counted). What each category proves:

- **bad input**: every patch file or series.yaml tried ends in success or a
  `ForkpatchError` naming the file (and line): never another exception, a hang or a
  write. Hypothesis (grammar-shaped and random inputs) and atheris (libFuzzer, bounded
  time; `python fuzz/fuzz_patchfile.py -max_total_time=60`); every section of
  series.yaml is typed and checked on load; file modes and name lengths on parse.
- **path safety**: one case per escape vector in a patch (absolute, `..`, `.git` and its
  case-folded / 8.3 / HFS+ / trailing-dot spellings, symlinks the series creates,
  backslashes, drive letters), refused on import and on apply before anything is written.
- **writes outside the project**: forkpatch's own writes (conflict markers in the work
  tree, the multi-file commit journal, state.json, patches/, a copied or moved project)
  never follow a link out of the tree and never act on another repository; state files
  are versioned, checksummed and validated before they are trusted.
- **interruptions**: forkpatch SIGKILLs itself at the n-th write event
  (`FORKPATCH_TEST_KILL_AT`, a test hook in `fsutil`); afterwards series.yaml, patches/
  and dist/ are exactly the old or exactly the new content.
- **concurrency**: a second process is refused with the holder's pid; kill -9 of the
  holder and a lock file naming a dead pid do not block anyone.
- **fork moving**: a re-pointed base tag, a force-pushed branch, an unreachable or silent
  fork URL (bounded by `FORKPATCH_FETCH_TIMEOUT`): clear errors, nothing changed.
- **secrets**: credentials never show in output, files, reports or series.yaml.
- **publish gate**: a smoke report is validated against a strict schema and every tier is
  derived from its check results; the published bytes are the gated bytes; a killed
  directory publish is finished by the next run.
- **hostile wheels**: zip-slip names and zip bombs in every wheel forkpatch reads.
"""


def collect() -> list[tuple[str, object]]:
    """(module name, row) for every RELIABILITY row of the test modules, in ORDER."""
    for d in (HERE, HERE.parent):  # run as a script: the test modules import hardkit, fptest
        if str(d) not in sys.path:
            sys.path.insert(0, str(d))
    rows: list[tuple[str, object]] = []
    for path in sorted(HERE.glob("test_*.py")):
        module = importlib.import_module(path.stem)
        for row in getattr(module, "RELIABILITY", []):
            rows.append((path.stem, row))
    rows.sort(key=lambda mr: (ORDER.index(mr[1].category), mr[0]))  # type: ignore[attr-defined]
    return rows


def render(rows: list[tuple[str, object]]) -> str:
    out = [
        INTRO,
        "## Results\n",
        "| category | what | tried | refused | written outside | outcome (asserted) | tests |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for module, r in rows:
        out.append(
            f"| {r.category} | {r.what} | {r.tried} | {r.refused} | {r.outside} "  # type: ignore[attr-defined]
            f"| {r.outcome} | `tests/hardening/{module}.py` |"  # type: ignore[attr-defined]
        )
    return "\n".join(out) + "\n"


def main() -> int:
    DOC.write_text(render(collect()))
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
