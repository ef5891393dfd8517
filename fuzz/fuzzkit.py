"""What the atheris targets share: a seed corpus from the project's own files, and main()."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import atheris

REPO = Path(__file__).resolve().parents[1]


def with_seed_corpus(argv: list[str], pattern: str, seeds: Sequence[bytes]) -> list[str]:
    """Without a corpus directory, start from the project's files matching ``pattern``
    (relative to the repository) and ``seeds``."""
    if any(not a.startswith("-") for a in argv[1:]):
        return argv
    corpus = Path(tempfile.mkdtemp(prefix="fuzz-corpus-"))
    files = [f.read_bytes() for f in sorted(REPO.glob(pattern))] + list(seeds)
    for i, seed in enumerate(files):
        (corpus / f"seed-{i}").write_bytes(seed)
    return [*argv, str(corpus)]


def fuzz(target: Callable[[bytes], None], pattern: str, seeds: Sequence[bytes]) -> None:
    atheris.Setup(with_seed_corpus(sys.argv, pattern, seeds), target)
    atheris.Fuzz()
