"""A wheel's provenance is read once, validated (``Provenance.from_json``), and compared
with the series by one function, ``wheel_vs_series``, for the smoke run's provenance
check and for the bisect's start alike; nothing is filtered out of it by its words."""

from __future__ import annotations

import json
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from forkpatch.errors import SmokeError
from forkpatch.smoke.wheelinfo import wheel_vs_series
from forkpatch.wheels.identity import PROVENANCE_FILENAME, PatchRecord, Provenance
from forkpatch.wheels.wheelinfo import read_wheel
from support.wheelfactory import GOOD_PROVENANCE, make_wheel

GOOD = GOOD_PROVENANCE


def _wheel(tmp_path: Path, prov: object | None) -> Path:
    members = {"vllm/__init__.py": b""}
    if prov is not None:
        raw = prov if isinstance(prov, bytes) else json.dumps(prov).encode()
        members[f"1cat_vllm-1.2.1.dist-info/{PROVENANCE_FILENAME}"] = raw
    return make_wheel(tmp_path / "1cat_vllm-1.2.1-py3-none-any.whl", members)


def test_a_wheel_without_provenance_has_none(tmp_path):
    assert read_wheel(_wheel(tmp_path, None)).provenance is None


def test_a_wheels_provenance_is_the_typed_one(tmp_path):
    prov = read_wheel(_wheel(tmp_path, GOOD)).provenance
    assert prov == Provenance.from_json(json.dumps(GOOD))
    assert prov is not None and prov.patches == (PatchRecord("p", sha256="b" * 64),)


def _without(key: str) -> dict[str, object]:
    return {k: v for k, v in GOOD.items() if k != key}


@pytest.mark.parametrize(
    "prov, says",
    [
        (_without("tag"), "missing key(s) tag"),
        (_without("builder"), "missing key(s) builder"),
        ({**GOOD, "colour": "red"}, "unknown key(s) colour"),
        ({**GOOD, "patches": [{"name": "p"}]}, "exactly one of sha256 / build_step"),
        ({**GOOD, "patches": [{"sha256": "b" * 64}]}, "missing key(s) name"),
        ({**GOOD, "schema": 7}, "provenance schema 7"),
        ({**GOOD, "members_sha256": "short"}, "members_sha256"),
        ([1, 2], "expected an object"),
        (b"{not json", "not valid JSON"),
    ],
)
def test_a_wrong_or_missing_field_names_the_wheel(tmp_path, prov, says):
    wheel = _wheel(tmp_path, prov)
    with pytest.raises(SmokeError) as exc:
        read_wheel(wheel)
    assert exc.value.message.startswith(f"{wheel.name}: {PROVENANCE_FILENAME}")
    assert says in exc.value.message
    assert "build-wheel" in (exc.value.tip or "")


# ------------------------------------------------------------------ against a series


@pytest.fixture
def project(example_build, tmp_path):
    from forkpatch.project import Project
    from support import smoke

    return Project(smoke.copy_project(example_build, tmp_path / "project"))


def _built(example_build) -> Provenance:
    prov = read_wheel(example_build.wheel).provenance
    assert prov is not None
    return prov


def _first_sha(p: Provenance) -> Provenance:
    first = replace(p.patches[0], sha256="0" * 64)
    return replace(p, patches=(first, *p.patches[1:]))


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda p: replace(p, tag="v9.9.9"), "tag: wheel has 'v9.9.9'"),
        (lambda p: replace(p, commit="f" * 40), "commit: wheel has 'ffff"),
        (lambda p: replace(p, fork_url="https://elsewhere/f.git"), "fork_url: wheel has"),
        (lambda p: replace(p, patches=p.patches[1:]), "patches missing from the wheel"),
        (lambda p: replace(p, patches=p.patches[::-1]), "patch order differs"),
        (_first_sha, "wheel has sha256 0000"),
    ],
)
def test_one_comparison_names_each_difference(example_build, project, change, says):
    prov = _built(example_build)
    assert wheel_vs_series(prov, project) == []
    # How it was built is a fact of that build, not of the series.
    other_build = replace(prov, builder=replace(prov.builder, mode="container", image_id="x"))
    assert wheel_vs_series(other_build, project) == []
    diffs = wheel_vs_series(change(prov), project)
    assert any(says in d for d in diffs), diffs


def test_the_smoke_check_and_the_bisect_say_the_same(example_build, tmp_path, capsys):
    """The series edited after the build: the smoke run's provenance problems and the
    bisect's refusal both carry wheel_vs_series's lines, and the wheel's RECORD problems
    come once, from the integrity check, never as a filtered-out line."""
    from forkpatch.project import Project
    from forkpatch.smoke.bisect import BisectOptions, bisect
    from forkpatch.smoke.runner import provenance_vs_series
    from support import smoke

    root = smoke.copy_project(example_build, tmp_path / "project", edit_description=True)
    project = Project(root)
    info = read_wheel(example_build.wheel)
    assert info.provenance is not None
    diffs = wheel_vs_series(info.provenance, project)
    assert diffs and any("cli-version" in d for d in diffs)
    problems = provenance_vs_series(info, project)
    assert problems == [f"provenance vs series.yaml: {d}" for d in diffs]
    with pytest.raises(SmokeError) as exc:
        bisect(
            BisectOptions(target=example_build.wheel, base_wheel=example_build.base_wheel), project
        )
    assert exc.value.message.endswith("; ".join(diffs))

    # A wheel whose bytes changed after the build: its RECORD problem once, the series'
    # differences after it, and no line about verification among those.
    broken = tmp_path / example_build.wheel.name
    with zipfile.ZipFile(example_build.wheel) as src, zipfile.ZipFile(broken, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "vllm/__init__.py":
                data += b"\n# changed after the build\n"
            dst.writestr(item, data)
    problems = provenance_vs_series(read_wheel(broken), project)
    assert problems[0].startswith("the wheel fails RECORD verification")
    assert problems[1:] == [f"provenance vs series.yaml: {d}" for d in diffs]
