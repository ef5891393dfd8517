"""docs/reliability.md states the suite's figures: it must be what the case tables give."""

from __future__ import annotations

from support import reliability


def test_the_reliability_doc_matches_the_suites_cases() -> None:
    rows = reliability.collect()
    categories = {row.category for _module, row in rows}
    assert categories == set(reliability.ORDER), categories ^ set(reliability.ORDER)
    assert reliability.DOC.read_text() == reliability.render(rows), (
        "docs/reliability.md is out of date: run `PYTHONPATH=tests python -m support.reliability`"
    )
