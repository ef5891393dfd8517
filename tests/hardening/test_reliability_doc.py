"""docs/reliability.md states the suite's figures: it must be what the case tables give."""

from __future__ import annotations

import reliability


def test_the_reliability_doc_matches_the_suites_cases() -> None:
    rows = reliability.collect()
    categories = {row.category for _module, row in rows}  # type: ignore[attr-defined]
    assert categories == set(reliability.ORDER), categories ^ set(reliability.ORDER)
    assert reliability.DOC.read_text() == reliability.render(rows), (
        "docs/reliability.md is out of date: run `python tests/hardening/reliability.py`"
    )
