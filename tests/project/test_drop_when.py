"""series.yaml's drop-when: the plain text form, and the structured form beside its text."""

from __future__ import annotations

import pytest

from forkpatch.errors import SeriesError
from forkpatch.series import dump_series, parse_series
from forkpatch.smoke import checks

C = "a" * 40
HEAD = f"version: 1\nfork:\n  name: f\n  url: /x\n  distribution: 1cat-vllm\nbase:\n  tag: v1\n  commit: {C}\npatches:\n"


def _entry(drop_when: str) -> str:
    return HEAD + "  - name: p\n    file: p.patch\n    summary: s\n" + drop_when


def _err(text: str) -> str:
    with pytest.raises(SeriesError) as exc:
        parse_series(text)
    return f"{exc.value}\n{exc.value.tip}"


def test_plain_text_still_loads_and_is_not_a_condition():
    p = parse_series(_entry("    drop-when: base is v1.3.0 or later\n")).patches[0]
    assert p.drop_when == "base is v1.3.0 or later"
    assert not p.drop_condition and p.drop_when_passes_without == ()


@pytest.mark.parametrize(
    "body",
    [
        "    drop-when:\n      text: gone upstream\n      upstreamed: true\n",
        "    drop-when:\n      text: it works without\n      passes-without: [static.cli-version]\n",
        (
            "    drop-when:\n      passes-without: [static.cli-version, sm70.capability]\n"
            "      upstreamed: true\n"
        ),
    ],
)
def test_structured_form_round_trips_byte_for_byte(body):
    text = _entry(body)
    series = parse_series(text)
    assert dump_series(series) == text
    assert series.patches[0].drop_condition


def test_structured_fields():
    p = parse_series(
        _entry(
            "    drop-when:\n      text: t\n"
            "      passes-without: [static.cli-version, sm70.capability]\n"
        )
    ).patches[0]
    assert (p.drop_when, p.drop_when_passes_without, p.drop_when_upstreamed) == (
        "t",
        ("static.cli-version", "sm70.capability"),
        False,
    )


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (
            "    drop-when:\n      text: t\n      upstream: true\n",
            ["series.yaml:", "did you mean 'upstreamed'"],
        ),
        ("    drop-when:\n      upstreamed: yes-ish\n", ["upstreamed must be true or false"]),
        ("    drop-when:\n      passes-without: static.cli-version\n", ["non-empty list"]),
        ("    drop-when:\n      passes-without: []\n", ["non-empty list"]),
        ("    drop-when:\n      text: only words\n", ["needs a condition", "plain text"]),
        ("    drop-when:\n      upstreamed: false\n", ["needs a condition"]),
        ("    drop-when: [a, b]\n", ["drop-when must be a string"]),
    ],
)
def test_bad_structured_forms_name_the_line(body, words):
    message = _err(_entry(body))
    for w in words:
        assert w in message, message
    assert "series.yaml:1" in message or "series.yaml:" in message


@pytest.mark.parametrize(
    ("ids", "typo", "meant"),
    [
        ("[static.cli-versoin]", "static.cli-versoin", "static.cli-version"),
        (
            "[sm70.capability, sm70.fp8-per-blok-config]",
            "sm70.fp8-per-blok-config",
            "sm70.fp8-per-block-config",
        ),
        ("\n        - static.kernel-arch", "static.kernel-arch", "static.kernel-archs"),
    ],
)
def test_unknown_check_in_passes_without_is_refused_on_load_with_a_suggestion(ids, typo, meant):
    # Refused when series.yaml is read (every command), not only when smoke runs.
    with pytest.raises(SeriesError) as exc:
        parse_series(_entry(f"    drop-when:\n      passes-without: {ids}\n"))
    message = str(exc.value)
    assert f"drop-when.passes-without names unknown smoke check '{typo}'" in message
    assert f"did you mean '{meant}'" in message
    assert "series.yaml:" in message


def test_a_team_check_may_be_named_in_passes_without():
    text = _entry("    drop-when:\n      passes-without: [static.our-import]\n")
    text += "smoke:\n  checks:\n    static.our-import:\n      pytest: tests/t.py::test_x\n"
    series = parse_series(text)
    assert series.patches[0].drop_when_passes_without == ("static.our-import",)
    checks.validate_series(series)


def test_the_shipped_series_declares_its_conditions():
    from support import REPO_ROOT

    series = parse_series((REPO_ROOT / "series.yaml").read_text())
    floor, cli = series.get("capability-floor"), series.get("cli-version")
    assert floor.drop_when_passes_without == ("sm70.fp8-per-block-config",)
    assert "accepts 7.0" in floor.drop_when
    assert cli.drop_when_upstreamed and cli.drop_when.startswith("base is v1.3.0")
    checks.validate_series(series)
