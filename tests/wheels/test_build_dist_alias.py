"""The vllm dist alias, for real: install the overlaid wheel into fresh venvs."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from forkpatch.errors import BuildError
from forkpatch.wheels.dist_alias import add_vllm_dist_alias, alias_module_name, alias_pth_name
from forkpatch.wheels.identity import Provenance
from forkpatch.wheels.overlay import overlay_wheel
from support import wheelfactory
from support.venvs import make_venv, pip, purelib

NEW = "1.2.1+cpu.fp.abcdef0123"  # a local suffix that a hand-typed version would lose

PROBE = r"""
import importlib.metadata as md, json, sys
out = {}
for q in ("vllm", "VLLM", "1cat-vllm", "1cat_vllm"):
    try:
        out[q] = md.version(q)
    except md.PackageNotFoundError:
        out[q] = None
out["all_names"] = sorted(d.metadata["Name"] for d in md.distributions())
out["vllm_scripts"] = [ep.value for ep in md.entry_points(group="console_scripts") if ep.name == "vllm"]
out["pkgs"] = md.packages_distributions().get("vllm")
try:
    import vllm
    out["vllm.__version__"] = vllm.__version__
except ImportError:
    out["vllm.__version__"] = None
print(json.dumps(out))
"""


def probe(python: Path, env: dict[str, str] | None = None) -> dict[str, object]:
    r = subprocess.run(
        [str(python), "-c", PROBE], capture_output=True, text=True, check=True, env=env
    )
    return json.loads(r.stdout)


def tree(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


@pytest.fixture(scope="module")
def alias_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("alias")
    base = wheelfactory.build_wheel(d, wheelfactory.base_files("1.2.1+cpu"), version="1.2.1+cpu")
    out = d / "out"
    out.mkdir()
    prov = Provenance.from_json(
        json.dumps(
            {
                "schema": 1,
                "fork_url": "u",
                "tag": "v1.2.1",
                "commit": "c" * 40,
                "patches": [{"name": "vllm-dist-info", "build_step": "vllm-dist-info"}],
                "forkpatch_version": "0.1.0",
                "builder": {"mode": "overlay"},
            }
        )
    )
    return overlay_wheel(
        base,
        replacements={},
        new_version=NEW,
        provenance=prov,
        out_dir=out,
        extra_steps=[add_vllm_dist_alias],
        expected_fork_version="1.2.1+cpu",
    )


def test_pip_install_alias_uninstall(alias_wheel: Path, tmp_path: Path) -> None:
    py = make_venv(tmp_path / "venv")
    site = purelib(py)
    before = tree(site)
    assert probe(py)["vllm"] is None

    pip(py, "install", "--no-index", str(alias_wheel))
    got = probe(py)
    assert got["vllm"] == got["VLLM"] == got["1cat-vllm"] == got["1cat_vllm"] == NEW
    assert got["vllm.__version__"] == NEW
    assert got["all_names"] == ["1cat-vllm"]  # no phantom, no duplicate
    assert got["vllm_scripts"] == ["vllm.entrypoints.cli.main:main"]  # entry points not doubled
    assert got["pkgs"] == ["1cat-vllm"]

    listed = json.loads(pip(py, "list", "--format", "json").stdout)
    assert [p["name"] for p in listed] == ["1cat-vllm"]
    assert pip(py, "check").returncode == 0

    # pip must not consider a `vllm` requirement satisfied
    plugdir = tmp_path / "plug"
    plugdir.mkdir()
    plugin = wheelfactory.build_wheel(
        plugdir,
        {"vllm_plugin_x/__init__.py": b""},
        name="vllm-plugin-x",
        version="0.1",
        requires=("vllm",),
        entry_points=None,
    )
    r = pip(py, "install", "--no-index", "--find-links", str(plugdir), str(plugin), check=False)
    assert r.returncode != 0 and "vllm" in r.stdout + r.stderr

    # cheap at start: the .pth loads the small module, importlib.metadata is not imported
    r = subprocess.run(
        [str(py), "-X", "importtime", "-c", "pass"], capture_output=True, text=True, check=False
    )
    assert "_1cat_vllm_dist_alias" in r.stderr
    assert "importlib.metadata" not in r.stderr

    # fail-safe: a damaged install (module gone, .pth left) starts silently
    mod = site / alias_module_name("1cat-vllm")
    mod.rename(mod.with_suffix(".bak"))
    shutil.rmtree(site / "__pycache__", ignore_errors=True)
    r = subprocess.run([str(py), "-c", "print('ok')"], capture_output=True, text=True, check=False)
    assert (r.returncode, r.stdout, r.stderr) == (0, "ok\n", "")
    mod.with_suffix(".bak").rename(mod)

    # a real vllm dist-info (e.g. the operators' old hand-written one) wins over the alias
    fake = site / "vllm-1.2.1.dist-info"
    fake.mkdir()
    (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 1.2.1\n")
    assert probe(py)["vllm"] == "1.2.1"
    shutil.rmtree(fake)

    pip(py, "uninstall", "-y", "1cat-vllm")
    after = tree(site)
    assert after == before, sorted(after ^ before)
    assert probe(py)["vllm"] is None


def test_installer_validates_and_installs(alias_wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    py = make_venv(venv)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "installer",
            "--validate-record",
            "all",
            "--prefix",
            str(venv),
            str(alias_wheel),
        ],
        check=True,
        capture_output=True,
    )
    got = probe(py)
    assert got["vllm"] == got["1cat-vllm"] == NEW
    assert (purelib(py) / alias_pth_name("1cat-vllm")).is_file()


def test_backport_importlib_metadata(alias_wheel: Path, tmp_path: Path) -> None:
    """Code using the importlib_metadata backport gets the alias too."""
    import importlib

    importlib_metadata = pytest.importorskip("importlib_metadata")
    # the backport and its runtime dependencies, copied onto PYTHONPATH
    deps = [importlib_metadata, pytest.importorskip("zipp")]
    for optional in ("lazy_importer",):
        with contextlib.suppress(ImportError):
            deps.append(importlib.import_module(optional))
    venv = tmp_path / "venv"
    py = make_venv(venv)
    pip(py, "install", "--no-index", "--no-deps", str(alias_wheel))
    extra = tmp_path / "extra"
    extra.mkdir()
    for mod in deps:
        src = Path(mod.__file__).parent  # type: ignore[arg-type]
        shutil.copytree(src, extra / src.name)
    env = {**os.environ, "PYTHONPATH": str(extra)}
    r = subprocess.run(
        [str(py), "-c", "import importlib_metadata as m; print(m.version('vllm'))"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert r.stdout.strip() == NEW


def test_step_refuses_fake_dist_info(tmp_path: Path, provenance: Provenance) -> None:
    files = {**wheelfactory.base_files(), "vllm-1.2.1.dist-info/METADATA": b"Name: vllm\n"}
    base = wheelfactory.build_wheel(tmp_path, files)
    out = tmp_path / "o"
    out.mkdir()
    with pytest.raises(BuildError, match=r"vllm-1\.2\.1\.dist-info"):
        overlay_wheel(
            base,
            replacements={},
            new_version="1.2.1+fp.abc",
            provenance=provenance,
            out_dir=out,
            extra_steps=[add_vllm_dist_alias],
        )
    assert list(out.iterdir()) == []
