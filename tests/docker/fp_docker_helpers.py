"""Helpers for the docker tests: the repository root, build-container lookup.

(A plain module rather than conftest.py so that tests can import it by name.)
The synthetic fork lives in tests/fptest.py (unit tests use it too); it is
re-exported here for the docker tests.
"""

from __future__ import annotations

from pathlib import Path

from fptest import make_synthetic_fork

REPO = Path(__file__).resolve().parents[2]


def build_containers(client) -> list:  # type: ignore[no-untyped-def]
    """All forkpatch build containers (running or not) on the engine."""
    return client.containers.list(all=True, filters={"label": "org.forkpatch.wheels"})


__all__ = ["REPO", "build_containers", "make_synthetic_fork"]
