"""Integration: a real wheel from the example fork through the smoke suite (CLI, real venvs)."""

from __future__ import annotations

import importlib.util
import json
import xml.etree.ElementTree as ET

import pytest

from forkpatch.fsutil import file_sha256
from support import REPO_ROOT, smoke
from support.cli import Runner

pytestmark = pytest.mark.slow


def _cuda() -> tuple[bool, list[tuple[int, int]]]:
    try:
        import torch
    except ImportError:
        return False, []
    if not torch.cuda.is_available():
        return False, []
    return True, [
        tuple(torch.cuda.get_device_capability(i)) for i in range(torch.cuda.device_count())
    ]


def _has_torch() -> bool:
    return importlib.util.find_spec("torch") is not None


def test_static_tier_passes_and_missing_hardware_is_not_run(example_build, tmp_path, capsys):
    project = smoke.copy_project(example_build, tmp_path / "project")
    smoke.set_smoke(
        project,
        {
            "cli-version": ["static.cli-version"],
            "capability-floor": ["sm70.capability", "sm70.fp8-per-block-config"],
        },
    )
    run = Runner(project, capsys)
    junit = tmp_path / "smoke.xml"
    code, out, err = run(
        "smoke", str(example_build.wheel), "--json", "--junit", str(junit), expect=None
    )
    data = json.loads(out)
    # The default --tier sm70 asks for every tier: one that did not run is exit 5.
    assert code == (0 if set(data["tiers"]["status"].values()) == {"passed"} else 5), err
    sha = file_sha256(example_build.wheel)

    assert data["wheel"]["sha256"] == sha and data["passed"] is True
    assert data["environment"]["deps"] == "system"
    assert data["environment"]["system_site_packages"] is True
    status = data["tiers"]["status"]
    assert status["static"] == "passed"
    by_id = {c["id"]: c for c in data["checks"]}
    # vllm came from the venv, never from the project or the fork's tree.
    venv_site = by_id["static.installed-from-wheel"]["detail"]
    assert "site-packages" in venv_site and str(project) not in venv_site
    assert by_id["static.cli-version"]["patches"] == ["cli-version"]
    assert by_id["static.provenance"]["detail"].endswith("matches the series")
    assert "vllm.utils.deep_gemm" in by_id["static.import-patched-modules"]["detail"]
    cuda, caps = _cuda()
    if not cuda:
        assert status["gpu"] == status["sm70"] == "not-run"
        # Without torch (a bare machine) the reason names it and how to install it.
        want = "no CUDA device" if _has_torch() else "needs the module 'torch'"
        assert want in data["tiers"]["not_run"]["sm70"]
        assert data["device"]["devices"] == []
    elif any(c != (7, 0) for c in caps):
        assert status["gpu"] == "passed" and status["sm70"] == "not-run"
        assert "not (7, 0)" in data["tiers"]["not_run"]["sm70"]
    for c in data["checks"]:
        if c["tier"] != "static" and status[c["tier"]] == "not-run":
            assert c["outcome"] == "not-run" and c["detail"]
    patches = {p["name"]: p for p in data["patches"]}
    assert patches["cli-version"]["status"] == "passed"
    assert patches["capability-floor"]["status"] in ("not-run", "passed", "failed")
    assert [p["name"] for p in data["patches"]] == [
        "capability-floor",
        "odd-width-padding",
        "eager-block-cast",
        "cli-version",
        "vllm-dist-info",
    ]

    stored = project / ".forkpatch" / "smoke" / f"{sha}.json"
    assert json.loads(stored.read_text()) == data
    # The checks ran from the suite's copy beside the venv, nothing of forkpatch's tree.
    sys_path = data["environment"]["sys_path"]
    assert sys_path[0].endswith("incheck-suite"), sys_path
    assert not [p for p in sys_path if p.startswith(str(REPO_ROOT / "src"))], sys_path
    root = ET.fromstring(junit.read_bytes())
    cases = {c.get("name"): c for c in root.iter("testcase")}
    if not cuda:
        assert cases["sm70.capability"].find("skipped") is not None
    assert cases["static.version-metadata"].find("failure") is None
    assert "smoke 1.2.1+fp." in err


def test_deps_none_reports_torch_checks_as_not_run(example_build, tmp_path, capsys):
    project = smoke.copy_project(example_build, tmp_path / "project")
    smoke.set_smoke(project, {"odd-width-padding": ["static.odd-width-padding-cpu"]})
    run = Runner(project, capsys)
    _, out, _ = run(
        "smoke", str(example_build.wheel), "--tier", "static", "--deps", "none", "--json", expect=5
    )
    data = json.loads(out)
    by_id = {c["id"]: c for c in data["checks"]}
    assert by_id["static.odd-width-padding-cpu"]["outcome"] == "not-run"
    assert "torch" in by_id["static.odd-width-padding-cpu"]["detail"]
    # The example's patched modules import torch lazily, so importing them is proven
    # even without torch; the check that needs torch is not run, never passed.
    assert by_id["static.import-patched-modules"]["outcome"] == "passed"
    assert data["tiers"]["status"]["static"] == "incomplete"
    assert data["tiers"]["status"]["sm70"] == "not-run"
    assert "not requested" in data["tiers"]["not_run"]["sm70"]
    assert data["environment"]["system_site_packages"] is False
    assert {p["name"]: p["status"] for p in data["patches"]}["odd-width-padding"] == "not-run"


def test_failing_check_exits_1_and_names_the_patch(example_build, tmp_path, capsys):
    """The example fork has no vllm.platforms.interface: the real patch set's CPU check errors."""
    if not _has_torch():
        pytest.skip(
            "needs torch in this python (the check only errors once it runs; without "
            "torch it is not-run): `pip install torch==2.13.0`, as .ci/run does"
        )
    project = smoke.copy_project(example_build, tmp_path / "project")
    smoke.set_smoke(project, {"capability-floor": ["static.capability-floor-cpu"]})
    run = Runner(project, capsys)
    _code, out, err = run("smoke", str(example_build.wheel), "--tier", "static", "--json", expect=1)
    data = json.loads(out)
    assert data["passed"] is False and data["tiers"]["status"]["static"] == "failed"
    # The patch declares the check; whether it broke it is for --bisect to say.
    patches = {p["name"]: p["status"] for p in data["patches"]}
    assert patches["capability-floor"] == "declared-check-failed"
    assert "failed" not in {s for n, s in patches.items() if n != "capability-floor"}
    assert (
        "1 smoke check(s) failed: static.capability-floor-cpu (declared by capability-floor)" in err
    )
    assert "patch capability-floor: declares static.capability-floor-cpu (failed)" in err
    assert "patch cli-version: no checks" in err


def test_edited_patch_fails_the_provenance_check(example_build, tmp_path, capsys):
    project = smoke.copy_project(example_build, tmp_path / "project", edit_description=True)
    run = Runner(project, capsys)
    _, out, _ = run(
        "smoke", str(example_build.wheel), "--tier", "static", "--deps", "none", "--json", expect=1
    )
    prov = {c["id"]: c for c in json.loads(out)["checks"]}["static.provenance"]
    assert prov["outcome"] == "failed"
    assert "cli-version" in prov["detail"] and "sha256" in prov["detail"]


def test_refusals_before_any_environment_is_made(example_build, tmp_path, capsys):
    project = smoke.copy_project(example_build, tmp_path / "project")
    smoke.set_smoke(project, {"cli-version": ["static.cli-version"]})
    series = project / "series.yaml"
    series.write_text(series.read_text().replace("static.cli-version", "static.cli-verison"))
    run = Runner(project, capsys)
    _, _, err = run("smoke", str(example_build.wheel), expect=1)
    assert "unknown smoke check 'static.cli-verison'" in err
    assert "did you mean 'static.cli-version'" in err
    not_a_wheel = tmp_path / "x.whl"
    not_a_wheel.write_text("nope")
    _, _, err = Runner(tmp_path, capsys)("smoke", str(not_a_wheel), expect=1)
    assert "not a wheel file name" in err
    _, _, err = Runner(tmp_path, capsys)(
        "smoke", str(example_build.base_wheel), "--tier", "bogus", expect=2
    )
    _, _, err = Runner(tmp_path, capsys)("smoke", expect=2)
    assert "no wheel given" in err


def test_gpu_jit_tier_runs_beside_sm70_never_as_it(example_build, tmp_path, capsys):
    """--tier gpu-jit runs static, gpu and gpu-jit (sm70 not requested); without a GPU
    or the PTX library its checks are not run, each with the reason; a --ptx-lib that
    does not exist is refused before any environment is made."""
    project = smoke.copy_project(example_build, tmp_path / "project")
    run = Runner(project, capsys)
    missing = tmp_path / "libforkpatch_sm70_fp8.so"
    _, _, err = run(
        "smoke", str(example_build.wheel), "--tier", "gpu-jit", "--ptx-lib", str(missing), expect=1
    )
    assert f"--ptx-lib {missing}: no such file" in err and "ci/sm70-ptx-lib.sh" in err
    code, out, _err = run(
        "smoke", str(example_build.wheel), "--tier", "gpu-jit", "--json", expect=None
    )
    data = json.loads(out)
    # A tier asked for that did not run (no GPU, no library) is exit 5, never 0.
    assert code == (0 if data["tiers"]["status"]["gpu-jit"] == "passed" else 5)
    assert data["tiers"]["requested"] == ["static", "gpu", "gpu-jit"]
    assert data["tiers"]["status"]["sm70"] == "not-run"
    assert data["tiers"]["not_run"]["sm70"] == "not requested (--tier gpu-jit)"
    jit = [c for c in data["checks"] if c["tier"] == "gpu-jit"]
    assert jit and all(c["outcome"] == "not-run" and c["detail"] for c in jit)
    if not _cuda()[0]:
        assert data["tiers"]["status"]["gpu-jit"] == "not-run"
