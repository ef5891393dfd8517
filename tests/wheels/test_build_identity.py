from __future__ import annotations

import pytest
from packaging.version import Version

from forkpatch.errors import BuildError
from forkpatch.wheels.identity import (
    BuilderInfo,
    PatchRecord,
    Provenance,
    build_version,
    patchset_label,
)

C = "0123456789abcdef0123456789abcdef01234567"


def test_label_is_short_stable_and_order_sensitive() -> None:
    items = [("a", b"1"), ("b", b"2")]
    label = patchset_label(C, items)
    assert len(label) == 10 and label == patchset_label(C, list(items))
    assert patchset_label(C, items[::-1]) != label
    assert patchset_label(C, [("a", b"1"), ("b", b"3")]) != label
    assert patchset_label(C, [("c", b"1"), ("b", b"2")]) != label
    assert patchset_label("f" * 40, items) != label
    # length-prefixing: moving bytes between name and content changes the label
    assert patchset_label(C, [("ab", b"c")]) != patchset_label(C, [("a", b"bc")])
    assert patchset_label(C, []) != patchset_label(C, [("", b"")])


@pytest.mark.parametrize(
    ("fork", "want"),
    [
        ("1.2.1", "1.2.1+fp.abc123def0"),
        ("1.2.1+cu128", "1.2.1+cu128.fp.abc123def0"),
        ("1.3.0.dev3+g1234abc.d20260801", "1.3.0.dev3+g1234abc.d20260801.fp.abc123def0"),
        ("v1.2.1", "1.2.1+fp.abc123def0"),
    ],
)
def test_build_version(fork: str, want: str) -> None:
    got = build_version(fork, "abc123def0")
    assert got == want
    assert str(Version(got)) == got


@pytest.mark.parametrize(
    ("fork", "label"),
    [("1.2.1", "ABC"), ("1.2.1", "a-b"), ("nope", "abc"), ("1.2.1+fp.abc", "def")],
)
def test_build_version_rejects(fork: str, label: str) -> None:
    with pytest.raises(BuildError):
        build_version(fork, label)


def test_provenance_round_trip(provenance: Provenance) -> None:
    text = provenance.to_json()
    assert Provenance.from_json(text) == provenance
    assert Provenance.from_json(text).to_json() == text
    # build_args are sorted, so the JSON does not depend on dict order
    a = BuilderInfo("overlay", build_args={"b": "1", "a": "2"})
    b = BuilderInfo("overlay", build_args={"a": "2", "b": "1"})
    assert a == b and a.to_dict() == b.to_dict()


def test_provenance_validation() -> None:
    with pytest.raises(BuildError, match="exactly one"):
        PatchRecord("x")
    with pytest.raises(BuildError, match="neither"):
        BuilderInfo("docker")  # type: ignore[arg-type]
    good = Provenance("u", "t", C, (), "0", BuilderInfo("container", image_id="sha256:1"))
    d = good.to_dict()
    d["surprise"] = 1
    import json

    with pytest.raises(BuildError, match="unknown key"):
        Provenance.from_json(json.dumps(d))
    with pytest.raises(BuildError, match="not valid JSON"):
        Provenance.from_json("{")


def test_label_never_all_digits() -> None:
    """PEP 440 would turn fp.0123456789 into fp.123456789: labels always keep a letter."""

    seen_digit_prefix = False
    for i in range(2000):
        label = patchset_label(C, [(f"p{i}", b"")])
        assert not label.isdigit()
        assert build_version("1.2.1", label) == f"1.2.1+fp.{label}"
        seen_digit_prefix |= label.startswith("f") and label[1:].isdigit()
    assert seen_digit_prefix
    with pytest.raises(BuildError, match="all digits"):
        build_version("1.2.1", "0123456789")
