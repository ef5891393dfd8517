"""One typed smoke report from the writer to publish: ``SmokeReport.from_json`` gives back
the class ``to_json`` writes, with typed tiers, checks and provenance, and reads the
reports forkpatch wrote before it was typed (``reports/``: written by that code, kept
byte for byte) into the same bytes again."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from forkpatch import kinds
from forkpatch.errors import SmokeError
from forkpatch.smoke import incheck
from forkpatch.smoke import report as rpt
from forkpatch.smoke.report import (
    CheckResult,
    PublishRecord,
    SmokeReport,
    TierResult,
    WheelEntry,
    dumps,
    junit_xml,
    read_report,
)
from forkpatch.wheels.identity import Provenance

REPORTS = Path(__file__).parent / "reports"
STORED = sorted(REPORTS.glob("*.smoke.json"))


def test_the_captured_reports_are_there():
    assert {p.name for p in STORED} >= {
        "full.smoke.json",
        "minimal.smoke.json",
        "no-device.smoke.json",
        "published.smoke.json",
    }


@pytest.mark.parametrize("path", STORED, ids=lambda p: p.name)
def test_a_report_written_before_the_types_reads_back_into_the_same_bytes(path: Path):
    report = read_report(path)
    assert type(report) is SmokeReport
    assert dumps(report) == path.read_bytes()
    again = SmokeReport.from_json(json.loads(dumps(report)), source=path)
    assert again == report


@pytest.mark.parametrize("name", ["full", "minimal", "no-device", "real-static"])
def test_the_junit_file_of_a_report_read_back_is_the_one_written_before(name: str):
    report = read_report(REPORTS / f"{name}.smoke.json")
    assert junit_xml(report) == (REPORTS / f"{name}.junit.xml").read_bytes()


def test_the_fields_read_back_are_typed():
    report = read_report(REPORTS / "full.smoke.json")
    assert isinstance(report.provenance, Provenance)
    assert [p.name for p in report.provenance.patches] == list(report.patches)
    assert all(isinstance(w, WheelEntry) for w in report.wheels)
    assert all(isinstance(c, CheckResult) for c in report.checks)
    assert report.tiers["static"] == TierResult(
        "incomplete",
        "static.packed-repack-cpu: torch is missing\nline 2",
        {"passed": 2, "not-run": 1},
        of=report.tiers["static"].of,
    )
    assert report.tiers["static"].ran == 2
    assert report.statuses() == {
        "static": "incomplete",
        "gpu": "passed",
        "sm70": "failed",
        "gpu-jit": "not-run",
    }
    assert report.cuda_devices() == [(0, "Tesla V100-SXM2-16GB", (7, 0))]
    assert report.deps == "system" and report.forkpatch_version == "0.1.0"
    published = read_report(REPORTS / "published.smoke.json").publish
    assert isinstance(published, PublishRecord)
    assert published.allowed_missing_tiers == {"gpu": "not run: not requested"}
    assert published.required_tiers_passed == ("static", "sm70")


@pytest.mark.parametrize(
    "cls, value",
    [
        (CheckResult, CheckResult("static.x", "static", "passed")),
        (TierResult, TierResult("passed", "", {"passed": 1})),
        (SmokeReport, read_report(REPORTS / "minimal.smoke.json")),
        (WheelEntry, WheelEntry("a" * 64)),
    ],
)
def test_report_values_are_frozen(cls, value):
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.detail = "changed"  # type: ignore[misc]


def test_the_check_suites_words_are_the_literals():
    """The suite runs inside the smoke venv without forkpatch: it keeps its own strings,
    which are the Literals' words."""
    suite = {incheck.PASSED, incheck.FAILED, incheck.ERROR, incheck.NOT_RUN}
    assert suite == set(kinds.CHECK_OUTCOMES)
    assert (rpt.PASSED, rpt.FAILED, rpt.ERROR, rpt.NOT_RUN) == kinds.CHECK_OUTCOMES
    assert {rpt.PASSED, rpt.FAILED, rpt.INCOMPLETE, rpt.NOT_RUN} == set(kinds.TIER_STATUSES)


@pytest.mark.parametrize(
    "make",
    [
        lambda: CheckResult("static.x", "static", "fine"),  # type: ignore[arg-type]
        lambda: CheckResult("static.x", "nightly", "passed"),  # type: ignore[arg-type]
        lambda: CheckResult.of("static.x", "static", "PASSED"),
    ],
)
def test_a_word_outside_its_literal_is_refused(make):
    with pytest.raises(ValueError, match="is not a"):
        make()


def _edited(tmp_path: Path, edit) -> Path:
    data = json.loads((REPORTS / "published.smoke.json").read_text(encoding="utf-8"))
    full = json.loads((REPORTS / "full.smoke.json").read_text(encoding="utf-8"))
    data["provenance"] = full["provenance"]
    data["device"] = full["device"]
    edit(data)
    path = tmp_path / "edited.smoke.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _set(keys: str, value: object):
    def edit(data: dict) -> None:
        *parents, last = keys.split(".")
        for k in parents:
            data = data[int(k)] if isinstance(data, list) else data[k]
        if value is KeyError:
            del data[last]
        else:
            data[last] = value

    return edit


@pytest.mark.parametrize(
    "edit, says",
    [
        (_set("checks.0.outcome", "fine"), "checks[0]: 'outcome' is 'fine', not one of passed"),
        (_set("checks.0.tier", "nightly"), "checks[0]: 'tier' is 'nightly', not one of static"),
        (_set("wheels.0.size", "big"), "wheels[0]: 'size' must be a whole number"),
        (_set("wheels.0.name", 3), "wheels[0]: 'name' must be a string"),
        (_set("provenance.tag", KeyError), "provenance: missing key(s) tag"),
        (_set("provenance.patches", "all"), "provenance: 'patches' must be a list"),
        (_set("provenance.colour", "red"), "provenance: unknown key(s) colour"),
        (_set("provenance", []), "provenance: has the wrong type (list)"),
        (_set("publish.by", None), "publish: 'by' must be a string"),
        (_set("publish.required_tiers_passed", ["nightly"]), "publish.required_tiers_passed[0]"),
        (
            _set("publish.allowed_missing_tiers", {"gpu": 1}),
            "publish.allowed_missing_tiers: 'gpu' must be a string",
        ),
        (_set("device", [1]), "device: has the wrong type"),
        (_set("environment", "system"), "environment: has the wrong type"),
        (_set("patches", [{"status": "passed"}]), "patches[0]: 'name' is missing"),
        (_set("forkpatch_version", 1), "forkpatch_version: has the wrong type"),
        (_set("tiers.status.static", "failed"), "but its check results say"),
    ],
)
def test_a_wrong_field_is_named_with_its_file(tmp_path: Path, edit, says: str):
    path = _edited(tmp_path, edit)
    with pytest.raises(SmokeError) as exc:
        read_report(path)
    assert exc.value.message.startswith(f"{path}: ")
    assert says in exc.value.message


def test_the_edited_fixture_itself_reads(tmp_path: Path):
    """The base of the variants above is a valid report: each refusal is its one edit."""
    report = read_report(_edited(tmp_path, lambda data: None))
    assert report.publish is not None and report.provenance is not None


@pytest.mark.parametrize(
    "rec, outcome, detail",
    [
        ({"id": "static.version-metadata", "outcome": "passed", "detail": "ok"}, "passed", "ok"),
        (
            {"id": "static.version-metadata", "outcome": "fine", "detail": "it said"},
            "error",
            (
                "the check process reported the outcome 'fine', none of passed, failed, error, "
                "not-run\nit said"
            ),
        ),
        ({"id": "static.version-metadata", "outcome": None}, "error", "outcome None"),
        ({"id": "static.version-metadata", "outcome": "not-run", "duration_s": "x"}, "not-run", ""),
    ],
)
def test_a_check_record_becomes_a_typed_result(rec, outcome, detail):
    from forkpatch.smoke import checks
    from forkpatch.smoke.runner import check_record

    got = check_record(rec, checks.registry(), {"static.version-metadata": ["p"]})
    assert got is not None and got.outcome == outcome and detail in got.detail
    assert got.tier == "static" and got.patches == ("p",) and got.duration_s == 0.0


@pytest.mark.parametrize("cid", ["static.nothing-like-it", 7, None])
def test_a_record_of_no_known_check_is_not_a_result(cid):
    from forkpatch.smoke import checks
    from forkpatch.smoke.runner import check_record

    assert check_record({"id": cid, "outcome": "passed"}, checks.registry(), {}) is None


@pytest.mark.parametrize("depth", [50, 5_000, 200_000])
def test_a_deeply_nested_report_is_refused_naming_it(tmp_path: Path, depth: int):
    data = json.loads((REPORTS / "minimal.smoke.json").read_text(encoding="utf-8"))
    text = json.dumps(data).replace('"device": {}', '"device": ' + "[" * depth + "]" * depth)
    path = tmp_path / "deep.smoke.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SmokeError) as exc:
        read_report(path)
    assert exc.value.message.startswith(f"{path}: ")
