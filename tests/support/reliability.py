"""docs/reliability.md from the hardening suite's own case tables.

Each ``tests/hardening/test_*.py`` lists its rows in ``RELIABILITY`` (a :class:`Row`
per class of bad input), computed from the tables its tests are parametrized with, so
the figures are the tests'. ``test_reliability_doc.py`` asserts that the document is
what this renders; after adding cases, run

    PYTHONPATH=tests python -m support.reliability      # rewrites docs/reliability.md

The output depends only on those tables (no run-time counts, no dates, no timings).
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from support import REPO_ROOT

SUITE = REPO_ROOT / "tests" / "hardening"
DOC = REPO_ROOT / "docs" / "reliability.md"


@dataclass(frozen=True)
class Row:
    """One row of docs/reliability.md: each hardening module lists its rows in
    ``RELIABILITY``, computed from its case tables (so the figures are the tests')."""

    category: str
    what: str
    tried: str
    outcome: str
    refused: str = "-"  # how many of the cases were refused (where refusal is the outcome)
    outside: str = "-"  # what was found written outside the project, in how many checks


ORDER = [
    "bad input: patch files",
    "bad input: series.yaml",
    "bad input: not a regular file",
    "path safety",
    "writes outside the project",
    "interruptions",
    "uncommitted edits",
    "concurrency",
    "changed outside forkpatch",
    "fork moving",
    "secrets",
    "publish gate",
    "hostile wheels",
    "the user's environment",
    "wheel integrity",
    "package index",
    "forge answers",
    "untrusted text",
    "external programs",
]

INTRO = """\
# Reliability: bad input, escapes, interruptions, concurrency, secrets, hostile wheels

Generated from the hardening suite (`tests/hardening/`): each test module lists its
rows in `RELIABILITY`, computed from the cases its tests are parametrized with, and
`test_reliability_doc.py` fails when this file does not match them. Rewrite it with
`PYTHONPATH=tests python -m support.reliability`. Do not edit by hand.

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
- **uncommitted edits**: what a person changed in the editing work tree and did not
  refresh yet (in no object: `git status` of `.forkpatch/worktree`) is never lost: every
  command that would rewrite the work tree (`Stack.guard_worktree`) refuses before changing
  anything, naming each file and each way out, or leaves the work tree as it is and says so.
- **concurrency**: a second process is refused with the holder's pid; kill -9 of the
  holder and a lock file naming a dead pid do not block anyone.
- **changed outside forkpatch**: a patch file or series.yaml entry that a `git pull` or
  a hand edit changed while a work tree exists is never silently reverted: forkpatch
  records what it last wrote or read for each patch file (blob ids in state.json);
  `status` names what changed and which side (the file, the work tree, or both);
  `export` and `refresh` refuse to write over it (`--force` keeps the work tree);
  `apply` and `edit` take it into a work tree without edits of its own.
- **fork moving**: a re-pointed base tag, a force-pushed branch, an unreachable or silent
  fork URL (bounded by `FORKPATCH_FETCH_TIMEOUT`): clear errors, nothing changed.
- **secrets**: credentials never show in output, files, reports or series.yaml.
- **publish gate**: a smoke report is validated against a strict schema and every tier is
  derived from its check results; the published bytes are the gated bytes; a killed
  directory publish is finished by the next run.
- **hostile wheels**: zip-slip names and zip bombs in every wheel forkpatch reads; the
  ELF modules static.kernel-archs reads (huge fat binaries, huge name tables, damaged or
  unknown compression, stripped section headers) in bounded memory and time, and a
  module it cannot read is "cannot tell", never "not applicable".
- **the user's environment**: the user's git configuration, attributes, excludes and
  hooks, the locale, a checkout's line endings and the fork's tags: the same bytes
  and verdicts as on a clean machine, or a clear error naming what was refused.
- **wheel integrity**: a base wheel's RECORD is checked before an overlay build uses it;
  provenance records the hash of every file the series changed and of the members, and
  `verify` checks the bytes against them and against the series re-applied in memory.
- **package index**: credentials go only to the host they were given for; every answer
  is bounded in bytes and in time (one deadline per request and one per command).
- **bad input: not a regular file**: a patch file, series.yaml, a state file, a report
  or a wheel that is a device, a FIFO, a directory or too large is refused naming it
  (`fsutil.read_regular`: fstat after open, bounded reads), never read.
- **forge answers**: `status --upstream` trusts a forge's answer only as its documented
  shape (types, values, depth, size), sends a token only to the API it is configured
  for, refuses URLs with credentials, and reads its cache as a bounded, validated state
  file; `status` itself never fails for any of it.
- **untrusted text**: control characters and escape sequences from outside are escaped
  at each boundary (terminal, JUnit XML, Markdown); `--json` stays valid JSON.
- **external programs**: every program but git (pip, a venv's python, a team's smoke
  check) runs through `forkpatch.proc` in a session of its own, ended as a group at its
  timeout or the operation's one deadline, on Ctrl-C and when it leaves children; its
  output is read into a bounded tail, never whole; the environment's credentials are
  hidden in what it printed wherever that is shown or stored.
"""


def _load(path: Path) -> ModuleType:
    """The test module at ``path``: the one pytest imported, else loaded from its file."""
    loaded = sys.modules.get(path.stem)
    if loaded is not None and Path(loaded.__file__ or "").resolve() == path.resolve():
        return loaded
    spec = importlib.util.spec_from_file_location(f"reliability_{path.stem}", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def collect() -> list[tuple[str, Row]]:
    """(module name, row) for every RELIABILITY row of the test modules, in ORDER."""
    rows: list[tuple[str, Row]] = []
    for path in sorted(SUITE.glob("test_*.py")):
        for row in getattr(_load(path), "RELIABILITY", []):
            rows.append((path.stem, row))
    rows.sort(key=lambda mr: (ORDER.index(mr[1].category), mr[0]))
    return rows


def render(rows: list[tuple[str, Row]]) -> str:
    out = [
        INTRO,
        "## Results\n",
        "| category | what | tried | refused | written outside | outcome (asserted) | tests |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for module, r in rows:
        out.append(
            f"| {r.category} | {r.what} | {r.tried} | {r.refused} | {r.outside} "
            f"| {r.outcome} | `tests/hardening/{module}.py` |"
        )
    return "\n".join(out) + "\n"


def main() -> int:
    DOC.write_text(render(collect()))
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
