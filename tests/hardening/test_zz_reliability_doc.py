"""Last in the hardening suite: render docs/reliability.md when FORKPATCH_WRITE_RELIABILITY=1."""

from __future__ import annotations

import os

import pytest


def test_write_reliability_doc() -> None:
    if os.environ.get("FORKPATCH_WRITE_RELIABILITY") != "1":
        pytest.skip(
            "set FORKPATCH_WRITE_RELIABILITY=1 to rewrite docs/reliability.md "
            "(or run tests/hardening/make_reliability_table.py)"
        )
    import make_reliability_table

    assert make_reliability_table.main() == 0
