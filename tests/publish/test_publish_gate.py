"""The publish gate: refusals are clear and nothing is published."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forkpatch.errors import PublishError
from forkpatch.publish import PublishOptions, publish
from forkpatch.smoke.report import REPORT_SUFFIX


def _wheel(d: Path) -> Path:
    return next(d.glob("*.whl"))


def _report_path(d: Path) -> Path:
    w = _wheel(d)
    return w.with_name(w.name + REPORT_SUFFIX)


def _publish(d: Path, target: Path, **kw) -> list:
    return publish(PublishOptions(wheels=(_wheel(d),), to=str(target), **kw))


def _edit_report(d: Path, fn) -> None:
    p = _report_path(d)
    data = json.loads(p.read_text())
    fn(data)
    p.write_text(json.dumps(data))


def _nothing_published(target: Path) -> bool:
    return not (target / "packages").exists() or not list((target / "packages").glob("*.whl"))


def test_no_report(wheel_dir, tmp_path):
    _report_path(wheel_dir).unlink()
    with pytest.raises(PublishError) as exc:
        _publish(wheel_dir, tmp_path / "idx", allow_missing_tiers=("sm70",))
    assert "no smoke report for " in exc.value.message
    assert "forkpatch smoke" in exc.value.tip
    assert _nothing_published(tmp_path / "idx")


def test_failing_report(wheel_dir, tmp_path):
    def fail(data):
        data["checks"][1]["outcome"] = "failed"
        data["passed"] = False
        data["tiers"]["status"]["static"] = "failed"  # a report must agree with its checks

    _edit_report(wheel_dir, fail)
    with pytest.raises(PublishError, match=r"did not pass: static\.version-metadata"):
        _publish(wheel_dir, tmp_path / "idx", allow_missing_tiers=("sm70",))
    assert _nothing_published(tmp_path / "idx")


def test_report_for_a_different_file(wheel_dir, tmp_path):
    w = _wheel(wheel_dir)
    w.write_bytes(w.read_bytes() + b"\0")  # same name, other bytes
    with pytest.raises(PublishError) as exc:
        _publish(wheel_dir, tmp_path / "idx", allow_missing_tiers=("sm70",))
    assert "no smoke report for" in exc.value.message
    assert "not this file" in exc.value.message
    assert _nothing_published(tmp_path / "idx")


def test_missing_tier_refused_then_override_is_recorded(wheel_dir, tmp_path):
    target = tmp_path / "idx"
    with pytest.raises(PublishError) as exc:
        _publish(wheel_dir, target)
    assert "tier sm70 is required but not-run" in exc.value.message
    assert "--allow-missing-tier sm70" in exc.value.tip
    assert _nothing_published(target)
    done = _publish(wheel_dir, target, allow_missing_tiers=("sm70",))
    assert done[0].action == "uploaded" and "sm70" in done[0].overrides
    published = json.loads(
        (target / "packages" / (_wheel(wheel_dir).name + REPORT_SUFFIX)).read_text()
    )
    assert "sm70" in published["publish"]["allowed_missing_tiers"]
    assert published["wheel"]["sha256"] == done[0].sha256


def test_override_never_covers_a_failed_tier(wheel_dir, tmp_path):
    def sm70_incomplete(data):
        # sm70 ran and one of its checks could not: incomplete, as its checks say.
        from forkpatch.smoke.report import CheckResult, derive_tiers

        data["tiers"]["requested"] = ["static", "gpu", "sm70"]
        sm70 = [c for c in data["checks"] if c["tier"] == "sm70"]
        if len(sm70) < 2:
            data["checks"] += [
                {"id": f"sm70.extra{i}", "tier": "sm70", "outcome": "not-run"} for i in range(2)
            ]
            sm70 = [c for c in data["checks"] if c["tier"] == "sm70"]
        for c in sm70:
            c["outcome"], c["detail"] = "not-run", "no torch"
        sm70[0]["outcome"] = "passed"
        checks = [CheckResult(c["id"], c["tier"], c["outcome"]) for c in data["checks"]]
        derived = derive_tiers(checks, data["tiers"]["requested"])
        data["tiers"]["status"] = {t: d.status for t, d in derived.items()}
        assert data["tiers"]["status"]["sm70"] == "incomplete"

    _edit_report(wheel_dir, sm70_incomplete)
    with pytest.raises(PublishError, match="only covers a tier that did not run"):
        _publish(wheel_dir, tmp_path / "idx", allow_missing_tiers=("sm70",))


def test_required_tiers_from_the_series(wheel_dir, tmp_path, example_build):
    from support import smoke

    project = smoke.copy_project(example_build, tmp_path / "project")
    smoke.set_smoke(project, {}, sections={"publish": {"required-tiers": ["static"]}})
    from forkpatch.project import Project

    done = publish(
        PublishOptions(wheels=(_wheel(wheel_dir),), to=str(tmp_path / "idx")), Project(project)
    )
    assert done[0].overrides == {}


@pytest.mark.parametrize("content", [b"x", b"PK\x03\x04 truncated", b""])
def test_a_file_that_is_no_wheel_is_named_as_the_user_gave_it(tmp_path, content):
    """The message names the user's file, never the private copy the gate reads."""
    wheel = tmp_path / "fake-1.0-py3-none-any.whl"
    wheel.write_bytes(content)
    with pytest.raises(PublishError) as exc:
        publish(PublishOptions(wheels=(wheel,), to=str(tmp_path / "index")))
    assert str(wheel) in exc.value.message and "forkpatch-publish-" not in exc.value.message


def _gpu_jit_passed(data: dict) -> None:
    """The report of a gpu-jit run that passed (the fork's kernels as PTX on an H200):
    its checks passed, sm70's not run, as its checks say."""
    from forkpatch.smoke.report import CheckResult, derive_tiers

    data["tiers"]["requested"] = ["static", "gpu", "gpu-jit"]
    data["checks"] = [c for c in data["checks"] if c["tier"] not in ("sm70", "gpu-jit")]
    data["checks"] += [
        {"id": cid, "tier": "gpu-jit", "outcome": "passed", "detail": "on NVIDIA H200"}
        for cid in ("gpu-jit.library", "gpu-jit.kernel-matrix", "gpu-jit.odd-width-linear")
    ]
    checks = [CheckResult(c["id"], c["tier"], c["outcome"]) for c in data["checks"]]
    derived = derive_tiers(checks, data["tiers"]["requested"])
    data["tiers"]["status"] = {t: d.status for t, d in derived.items()}
    data["tiers"]["run"] = [t for t, d in derived.items() if d.status != "not-run"]
    data["tiers"]["not_run"] = {t: d.reason for t, d in derived.items() if d.status == "not-run"}
    data["tiers"]["detail"] = {t: d.to_json() for t, d in derived.items()}
    assert data["tiers"]["status"]["gpu-jit"] == "passed"
    assert data["tiers"]["status"]["sm70"] == "not-run"


def test_a_passed_gpu_jit_tier_never_satisfies_sm70(wheel_dir, tmp_path):
    """gpu-jit runs the fork's kernels on a GPU that is not a V100: a report where it
    passed still lacks sm70, so publish refuses (and only the logged override passes),
    and it can be required as a tier of its own."""
    _edit_report(wheel_dir, _gpu_jit_passed)
    target = tmp_path / "idx"
    with pytest.raises(PublishError) as exc:
        _publish(wheel_dir, target)
    assert "tier sm70 is required but not-run" in exc.value.message
    assert _nothing_published(target)
    with pytest.raises(PublishError, match="tier sm70 is required but not-run"):
        _publish(wheel_dir, target, required_tiers=("static", "gpu-jit", "sm70"))
    done = _publish(wheel_dir, target, required_tiers=("static", "gpu-jit"))
    assert done[0].overrides == {}
