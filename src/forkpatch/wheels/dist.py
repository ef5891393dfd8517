"""The output directory of a build (dist/): wheels and their SHA256SUMS, written as one unit."""

from __future__ import annotations

from pathlib import Path

from forkpatch.fsutil import SUMS_FILE, commit_files, recover_files, sums_text, sweep_temps

#: The journal of a dist directory outside the project (inside it, the project's own).
DIST_JOURNAL = ".forkpatch-commit.json"


def dist_changes(out_dir: Path, staged: list[Path]) -> dict[Path, bytes | Path | None]:
    """The files that put ``staged`` wheels into ``out_dir``: each wheel, and the
    SHA256SUMS of every wheel there once they are in."""
    wheels: dict[str, Path | str] = {w.name: w for w in Path(out_dir).glob("*.whl")}
    wheels.update({w.name: w for w in staged})
    moves: dict[Path, bytes | Path | None] = {out_dir / w.name: w for w in staged}
    moves[out_dir / SUMS_FILE] = sums_text(wheels)
    return moves


def commit_dist(out_dir: Path, staged: list[Path]) -> None:
    """Move ``staged`` wheels into ``out_dir`` with its SHA256SUMS, as one unit (a
    journal in ``out_dir``: :func:`recover_dist` finishes what a kill interrupted)."""
    commit_files(dist_changes(out_dir, staged), journal=out_dir / DIST_JOURNAL, root=out_dir)


def recover_dist(out_dir: Path) -> None:
    """Finish a commit into ``out_dir`` that a killed build left, and remove the
    temporary files of its writers (the journal's, SHA256SUMS's)."""
    recover_files(out_dir / DIST_JOURNAL, root=out_dir)
    sweep_temps(out_dir)
