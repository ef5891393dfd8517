"""Unit tests: the check registry, tier gating, report status and JUnit output."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest

from forkpatch.errors import SeriesError, SmokeError
from forkpatch.series import BaseRef, ForkInfo, PatchEntry, Series, load_series
from forkpatch.smoke import checks, incheck
from forkpatch.smoke.report import (
    CheckResult,
    SmokeReport,
    WheelEntry,
    junit_xml,
    read_report,
    write_report,
)
from support import REPO_ROOT

# The ids the real patch set's series.yaml uses (what a V100 smoke check must prove).
REAL_SET = [
    "static.version-metadata",
    "static.cli-version",
    "static.import-patched-modules",
    "static.capability-floor-cpu",
    "static.odd-width-padding-cpu",
    "static.eager-block-cast-cpu",
    "static.packed-repack-cpu",
    "static.sm70-warmup-cpu",
    "sm70.capability",
    "sm70.ops-registered",
    "sm70.fp8-per-block-config",
    "sm70.odd-width-linear",
    "sm70.warmup",
    "sm70.tiny-model-generates",
]


def _series(*patches: PatchEntry) -> Series:
    return Series(
        fork=ForkInfo("f", "u", "1cat-vllm"), base=BaseRef("v1", "0" * 40), patches=patches
    )


def test_registry_has_the_real_patch_sets_checks():
    reg = checks.registry()
    assert set(REAL_SET) <= set(reg)
    for cid, spec in reg.items():
        assert cid.split(".")[0] == spec.tier
        assert spec.summary, cid
    # Every CPU twin of an SM70 check runs on the CPU and says it needs torch.
    assert all("torch" in reg[c].needs for c in reg if c.endswith("-cpu"))
    assert all({"cuda", "sm70"} <= set(reg[c].needs) for c in reg if c.startswith("sm70."))


def test_incheck_is_standalone():
    """The incheck package runs in the smoke venv: stdlib only at import time, relative
    imports within the package, and outside it the check ids alone (copied with it)."""
    import ast
    import sys

    package = Path(incheck.__file__).parent
    modules = sorted(package.glob("*.py"))
    assert len(modules) > 1 and not list(package.glob("*/*.py"))
    for path in modules:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        absolute = {
            a.name.split(".")[0]
            for n in ast.walk(tree)
            if isinstance(n, ast.Import)
            for a in n.names
        }
        absolute |= {
            (n.module or "").split(".")[0]
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and n.level == 0
        }
        assert "forkpatch" not in absolute, path.name
        outside = {
            (n.level, n.module)
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and n.level > 1
        }
        assert outside <= {(3, "checkids")}, (path.name, outside)
        top = {
            a.name.split(".")[0] for n in tree.body if isinstance(n, ast.Import) for a in n.names
        }
        top |= {
            (n.module or "").split(".")[0]
            for n in tree.body
            if isinstance(n, ast.ImportFrom) and n.level == 0
        }
        assert top <= set(sys.stdlib_module_names) | {"__future__"}, (path.name, top)
    checkids = ast.parse((package.parents[1] / "checkids.py").read_text(encoding="utf-8"))
    assert not [n for n in ast.walk(checkids) if isinstance(n, (ast.Import, ast.ImportFrom))]


def test_the_projects_real_series_names_only_known_checks():
    path = REPO_ROOT / "series.yaml"
    if not path.is_file():
        pytest.skip("no real series.yaml in this checkout")
    checks.validate_series(load_series(path), path=str(path))


def test_unknown_check_id_is_refused_with_a_suggestion():
    s = _series(
        PatchEntry(name="p", summary="s", file="p.patch", smoke=("static.cli-versoin",), line=12)
    )
    with pytest.raises(SeriesError) as exc:
        checks.validate_series(s)
    assert "series.yaml:12" in exc.value.message
    assert "did you mean 'static.cli-version'" in exc.value.message
    with pytest.raises(SmokeError):
        checks.get("sm70.nope")


def test_series_knows_every_check_of_the_suite():
    from forkpatch.series import HOST_SMOKE_CHECKS, SMOKE_CHECKS
    from forkpatch.smoke.kernels import HOST_CHECKS

    assert tuple(incheck.REGISTRY) == SMOKE_CHECKS
    assert tuple(HOST_CHECKS) == HOST_SMOKE_CHECKS


def test_a_check_outside_the_shared_id_list_is_refused():
    for check_id in ("static.not-in-the-list", "sm70.capabilty"):
        with pytest.raises(ValueError, match=r"not in checkids\.CHECK_IDS"):
            incheck.check(check_id)
    with pytest.raises(ValueError, match="registered twice"):
        incheck.check("static.provenance")(lambda ctx: None)


SERIES_HEAD = (
    "version: 1\nfork:\n  name: f\n  url: /nowhere\nbase:\n  tag: v1\n"
    f"  commit: {'a' * 40}\npatches:\n  - name: p\n    file: p.patch\n    summary: s\n"
)


@pytest.mark.parametrize(
    ("smoke", "line", "says"),
    [
        ("    smoke: [static.cli-verison]\n", 12, "did you mean 'static.cli-version'"),
        (
            "    smoke:\n      - sm70.capability\n      - sm70.warmpu\n",
            14,
            "did you mean 'sm70.warmup'",
        ),
        ("    smoke: [gpu.nothing-like-it-at-all]\n", 12, "'gpu.nothing-like-it-at-all'\n"),
        ("    smoke: [sm70.odd-width-linear, static.Provenance]\n", 12, "'static.provenance'"),
    ],
    ids=["flow-list", "block-list-second-item", "no-close-match", "case"],
)
def test_a_check_id_typo_is_refused_on_load(tmp_path, smoke, line, says):
    """Not only by `smoke`: every command that reads series.yaml refuses it."""
    from forkpatch.series import parse_series

    path = tmp_path / "series.yaml"
    path.write_text(SERIES_HEAD + smoke)
    with pytest.raises(SeriesError) as exc:
        parse_series(path.read_text(), path=str(path))
    text = str(exc.value) + "\n"
    assert f"series.yaml:{line}: patch 'p': unknown smoke check" in text, text
    assert says in text and "--list-checks" in text


def test_plan_baseline_then_patch_checks_in_tier_order():
    a = PatchEntry(
        name="a",
        summary="s",
        file="a.patch",
        smoke=("sm70.odd-width-linear", "static.odd-width-padding-cpu"),
    )
    b = PatchEntry(name="b", summary="s", file="b.patch", smoke=("sm70.odd-width-linear",))
    plan = checks.plan([a, b])
    ids = list(plan)
    tiers = [checks.registry()[i].tier for i in ids]
    assert tiers == sorted(tiers, key=incheck.TIERS.index)
    assert plan["sm70.odd-width-linear"] == ["a", "b"]
    assert plan["static.version-metadata"] == []  # baseline
    assert checks.tiers_up_to("gpu") == ("static", "gpu")
    assert checks.tiers_up_to("sm70") == ("static", "gpu", "sm70")
    # gpu-jit is a tier of its own beside sm70: it never runs (or passes) sm70's checks
    assert checks.tiers_up_to("gpu-jit") == ("static", "gpu", "gpu-jit")
    with pytest.raises(SmokeError, match="did you mean 'sm70'"):
        checks.tiers_up_to("sm7")


@pytest.mark.parametrize(
    "device,check_id,reason",
    [
        (
            {"torch": None, "reason": "torch is not importable (x)"},
            "static.packed-repack-cpu",
            "torch is not importable (x)",
        ),
        (
            {"torch": "2.10", "cuda_available": False, "reason": "no CUDA device: x"},
            "gpu.cuda-compute",
            "no CUDA device: x",
        ),
        (
            {
                "torch": "2.10",
                "cuda_available": True,
                "devices": [{"index": 0, "name": "NVIDIA H200", "capability": [9, 0]}],
            },
            "sm70.capability",
            "device NVIDIA H200 has capability (9, 0), not (7, 0)",
        ),
        (
            {
                "torch": "2.10",
                "cuda_available": True,
                "devices": [{"index": 0, "name": "Tesla V100-SXM2-32GB", "capability": [7, 0]}],
            },
            "sm70.capability",
            None,
        ),
        ({"torch": None}, "static.version-metadata", None),
    ],
)
def test_tier_gate_reasons(device, check_id, reason):
    assert incheck.gate(incheck.REGISTRY[check_id], device) == reason


_H200 = {
    "torch": "2.11",
    "cuda_available": True,
    "devices": [{"index": 0, "name": "NVIDIA H200", "capability": [9, 0]}],
}


@pytest.mark.parametrize(
    "device,ptx_lib,reason",
    [
        (_H200, "/x/libforkpatch_sm70_fp8.so", None),
        ({**_H200, "devices": [{"name": "Tesla V100", "capability": [7, 0]}]}, "/x/l.so", None),
        (
            _H200,
            None,
            "no PTX library given (forkpatch smoke --ptx-lib, built by ci/sm70-ptx-lib.sh)",
        ),
        (
            {**_H200, "devices": [{"name": "Tesla P100", "capability": [6, 0]}]},
            "/x/l.so",
            (
                "device Tesla P100 has capability (6, 0): the driver cannot JIT compute_70 PTX "
                "below (7, 0)"
            ),
        ),
        (
            {"torch": "2.11", "cuda_available": False, "reason": "no CUDA device: x"},
            "/x",
            "no CUDA device: x",
        ),
    ],
    ids=["h200", "v100", "no-library", "pascal", "no-gpu"],
)
def test_gpu_jit_gate_reasons(monkeypatch, device, ptx_lib, reason):
    """gpu-jit runs on any GPU of capability 7.0 or newer given the PTX library; each
    check's not-run reason names what is missing."""
    monkeypatch.setitem(incheck.run_spec(), "ptx_lib", ptx_lib)
    for cid, defn in incheck.REGISTRY.items():
        if defn.tier == "gpu-jit":
            assert incheck.gate(defn, device) == reason, cid


def test_gated_check_is_not_run_never_passed():
    res = incheck.run_one(
        incheck.REGISTRY["sm70.odd-width-linear"],
        incheck.Ctx(spec={"version": "1"}, device={"torch": None, "reason": "no torch"}),
    )
    assert res["outcome"] == "not-run" and res["detail"] == "no torch"


def _report(outcomes: dict[str, str], requested=("static", "gpu", "sm70")) -> SmokeReport:
    reg = checks.registry()
    return SmokeReport(
        wheels=[WheelEntry("a" * 64, file="w.whl")],
        primary_sha256="a" * 64,
        version="1",
        requested_tiers=list(requested),
        checks=[
            CheckResult(
                cid, reg[cid].tier, o, 0.5, f"why {cid}", ["p"] if cid.endswith("-cpu") else []
            )
            for cid, o in outcomes.items()
        ],
        environment={"deps": "none"},
        device={},
        patches=["p"],
    )


def test_tier_status():
    r = _report(
        {
            "static.version-metadata": "passed",
            "static.packed-repack-cpu": "not-run",
            "gpu.cuda-compute": "not-run",
            "sm70.capability": "passed",
        },
        requested=("static", "gpu", "sm70"),
    )
    st = r.to_json()["tiers"]
    assert st["status"] == {
        "static": "incomplete",
        "gpu": "not-run",
        "sm70": "passed",
        "gpu-jit": "not-run",
    }
    assert st["not_run"] == {
        "gpu": "why gpu.cuda-compute",
        "gpu-jit": "not requested (--tier sm70)",
    }
    assert st["run"] == ["static", "sm70"]
    assert r.passed
    assert [p.to_json() for p in r.per_patch()] == [
        {"name": "p", "status": "not-run", "checks": {"static.packed-repack-cpu": "not-run"}}
    ]
    r2 = _report({"static.version-metadata": "error"}, requested=("static",))
    assert not r2.passed and r2.to_json()["tiers"]["status"]["static"] == "failed"
    assert r2.to_json()["tiers"]["status"]["sm70"] == "not-run"


@pytest.mark.parametrize(
    "outcomes, requested",
    [
        ({"static.version-metadata": "passed", "gpu.cuda-compute": "not-run"}, ("static", "gpu")),
        (
            {
                "static.version-metadata": "passed",
                "static.packed-repack-cpu": "failed",
                "sm70.capability": "error",
                "gpu-jit.library": "not-run",
            },
            ("static", "gpu", "sm70"),
        ),
        ({"static.cli-version": "not-run", "static.provenance": "passed"}, ("static",)),
        ({}, ("static", "gpu", "gpu-jit")),
    ],
)
def test_the_reports_readers_say_what_its_json_says(tmp_path, outcomes, requested):
    """Callers read a SmokeReport's attributes (and a report file's, read back); they
    agree with the file it writes."""
    r = replace(_report(outcomes, requested=requested), started="2026-12-01T00:00:00Z")
    data = r.to_json()
    back = read_report(write_report(r, tmp_path / "r.json"))
    assert r.ran() == back.ran() == data["tiers"]["run"]
    assert back.primary_sha256 == r.primary_sha256 == data["wheel"]["sha256"]
    assert back.started == data["started"] and back.deps == data["environment"]["deps"]
    assert r.statuses() == data["tiers"]["status"]
    assert {t: r.status(t) for t in data["tiers"]["status"]} == data["tiers"]["status"]
    assert r.not_run() == data["tiers"]["not_run"]
    assert r.outcomes() == {c["id"]: c["outcome"] for c in data["checks"]}
    failed = [c["id"] for c in data["checks"] if c["outcome"] in ("failed", "error")]
    assert [c.id for c in r.failed()] == failed
    assert r.passed is data["passed"] is (not failed)


def test_junit_marks_not_run_as_skipped():
    data = _report(
        {
            "static.version-metadata": "passed",
            "static.cli-version": "failed",
            "gpu.cuda-compute": "not-run",
            "sm70.capability": "error",
        }
    )
    root = ET.fromstring(junit_xml(data))
    assert root.get("tests") == "4" and root.get("failures") == "1"
    assert root.get("errors") == "1" and root.get("skipped") == "1"
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert cases["gpu.cuda-compute"].find("skipped").get("message").startswith("not run: ")
    assert cases["static.cli-version"].find("failure") is not None
    assert cases["static.version-metadata"].find("skipped") is None
