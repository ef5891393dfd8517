"""Publishing to a plain directory that becomes a static PEP 503 index; pip installs back."""

from __future__ import annotations

import hashlib
import shutil

import pytest

from support.cli import Runner
from support.venvs import install_from_index

pytestmark = pytest.mark.slow


def test_publish_to_directory_and_pip_install_back(wheel_dir, tmp_path, capsys):
    wheel = next(wheel_dir.glob("*.whl"))
    target = tmp_path / "index"
    run = Runner(tmp_path, capsys)
    _, _, err = run("publish", str(wheel), "--to", str(target), "--allow-missing-tier", "sm70")
    assert "without tier sm70" in err
    pkg = target / "packages" / wheel.name
    assert pkg.read_bytes() == wheel.read_bytes()
    sums = (target / "packages" / "SHA256SUMS").read_text()
    assert f"{hashlib.sha256(wheel.read_bytes()).hexdigest()}  {wheel.name}\n" in sums
    assert (target / "packages" / (wheel.name + ".smoke.json")).is_file()
    page = (target / "simple" / "1cat-vllm" / "index.html").read_text()
    assert f"#sha256={hashlib.sha256(wheel.read_bytes()).hexdigest()}" in page
    assert 'href="1cat-vllm/"' in (target / "simple" / "index.html").read_text()

    # Idempotent: the same file again is a no-op.
    before = {p: p.stat().st_mtime_ns for p in (target / "simple").rglob("*.html")}
    _, _, err = run("publish", str(wheel), "--to", target.as_uri(), "--allow-missing-tier", "sm70")
    assert "already published" in err
    assert pkg.read_bytes() == wheel.read_bytes()
    assert {p: p.stat().st_mtime_ns for p in (target / "simple").rglob("*.html")} == before

    # pip installs it from file://DIR/simple into a fresh venv.
    version = wheel.name.split("-")[1]
    got = install_from_index(tmp_path / "consumer", (target / "simple").as_uri() + "/", version)
    assert got["dist"] == got["vllm"] == version
    assert str(tmp_path / "consumer") in got["file"]


def test_different_file_same_version_is_refused(wheel_dir, tmp_path, capsys):
    wheel = next(wheel_dir.glob("*.whl"))
    target = tmp_path / "index"
    run = Runner(tmp_path, capsys)
    run("publish", str(wheel), "--to", str(target), "--allow-missing-tier", "sm70")
    # A rebuilt file with the same name: other bytes, and a passing report for them.
    other = tmp_path / "other"
    shutil.copytree(wheel_dir, other)
    w2 = other / wheel.name
    w2.write_bytes(w2.read_bytes() + b"\0")
    report = other / (wheel.name + ".smoke.json")
    text = report.read_text().replace(
        hashlib.sha256(wheel.read_bytes()).hexdigest(), hashlib.sha256(w2.read_bytes()).hexdigest()
    )
    report.write_text(text)
    _, _, err = run(
        "publish", str(w2), "--to", str(target), "--allow-missing-tier", "sm70", expect=1
    )
    assert "already published with different content" in err
    assert (target / "packages" / wheel.name).read_bytes() == wheel.read_bytes()
