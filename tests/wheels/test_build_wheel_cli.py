"""`forkpatch build-wheel` end to end: the container path and the overlay path agree.

The same patched example series is built both ways; the Python files of the
overlay wheel must be byte-identical to those of the source build (the
container runs the example fork's own setup.py), and both carry provenance
that `forkpatch verify` accepts.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest

from forkpatch.example import build_release_wheel

pytestmark = pytest.mark.docker


def _py_members(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as zf:
        return {n: zf.read(n) for n in zf.namelist() if n.endswith(".py")}


def test_container_and_overlay_builds_agree(example_project, example_fork, standin_image, tmp_path):
    _project, run = example_project
    _, out, _ = run(
        "build-wheel",
        "--mode",
        "container",
        "--base-image",
        standin_image,
        "--no-toolchain-install",
        "-o",
        str(tmp_path / "container"),
        "--json",
    )
    container = json.loads(out)
    assert container["mode"] == "container"
    assert Path(container["log"]).is_file()
    # The provenance names the builder image by the id the engine gave for it.
    image_id = container["provenance"]["builder"]["image_id"]
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", image_id), image_id
    assert Path(container["log"]).read_text().rstrip("\n").endswith(" " + image_id)
    base = build_release_wheel(example_fork.path, "v1.2.1", tmp_path / "release")
    _, out, _ = run(
        "build-wheel",
        "--mode",
        "overlay",
        "--base-wheel",
        str(base),
        "-o",
        str(tmp_path / "overlay"),
        "--json",
    )
    overlay = json.loads(out)
    assert overlay["version"] == container["version"]
    assert overlay["version"].startswith("1.2.1+fp.")

    c_wheel, o_wheel = Path(container["wheels"][0]), Path(overlay["wheels"][0])
    # One distribution and one version; the tags may differ (the overlay keeps the base
    # wheel's, the container build makes its own).
    assert c_wheel.name.split("-")[:2] == o_wheel.name.split("-")[:2]
    c_py, o_py = _py_members(c_wheel), _py_members(o_wheel)
    assert set(c_py) == set(o_py)
    different = [n for n in c_py if c_py[n] != o_py[n]]
    assert different == []

    for wheel in (c_wheel, o_wheel):
        _code, out, _ = run("verify", str(wheel), "--json")
        data = json.loads(out)
        assert data["record_ok"] and data["matches_series"], data
    sums = (tmp_path / "container" / "SHA256SUMS").read_text()
    assert c_wheel.name in sums
