"""A module the smoke environment lacked is named once per report, with the command
that installs it: for torch, the fork's own pin read from the fork at the series'
base (the version in requirements/cuda.txt, the index setup.py takes it from)."""

from __future__ import annotations

import pytest

from forkpatch.project import Project
from forkpatch.smoke.incheck import missing_module_reason
from forkpatch.smoke.install import fork_pins, install_notes
from support.projects import scratch_project

SETUP = """URLS = {
    "torch==2.10.0": (
        "torch @ https://download.pytorch.org/whl/cu128/"
        "torch-2.10.0%2Bcu128-cp312-cp312-manylinux_2_28_x86_64.whl"
    ),
}
"""
CUDA = "-r common.txt\n\n# Dependencies for NVIDIA GPUs\ntorch==2.10.0\ntorchaudio==2.10.0\n"


def _not_run(cid: str, module: str, prefix: str = "") -> dict[str, str]:
    return {"id": cid, "outcome": "not-run", "detail": prefix + missing_module_reason(module)}


CHECKS = [
    _not_run("static.cli-version", "torch", "`vllm --version`: "),
    _not_run("static.import-patched-modules", "torch.nn", "importing vllm: "),
    _not_run("sm70.capability", "torch"),
    _not_run("static.other", "yaml"),
    {"id": "static.provenance", "outcome": "passed", "detail": "ok"},
]


@pytest.mark.parametrize(
    ("files", "want"),
    [
        (
            {"requirements/cuda.txt": CUDA, "setup.py": SETUP},
            "torch==2.10.0 --index-url https://download.pytorch.org/whl/cu128",
        ),
        ({"requirements/cuda.txt": CUDA.replace("2.10.0", "2.9.1")}, "torch==2.9.1"),
        ({"requirements/cuda.txt": "torch>=2.0\n", "setup.py": SETUP}, None),
        ({"README.md": "no requirements here\n"}, None),
    ],
    ids=["pin-and-index", "pin-only", "no-exact-pin", "no-requirements"],
)
def test_the_fork_pin_is_read_at_the_base(tmp_path, capsys, files, want):
    _fork, project, _run = scratch_project(tmp_path, capsys, files)
    pins = fork_pins(Project(root=project))
    assert pins == ({"torch": want} if want else {})


def test_the_pin_follows_the_base_not_the_fork_head(tmp_path, capsys):
    fork, project, _run = scratch_project(
        tmp_path, capsys, {"requirements/cuda.txt": CUDA, "setup.py": SETUP}
    )
    fork.add_file("requirements/cuda.txt", CUDA.replace("2.10.0", "9.9.9"))
    fork.commit("a newer torch after the base")
    assert fork_pins(Project(root=project))["torch"].startswith("torch==2.10.0 ")


def test_one_note_per_module_whatever_the_number_of_checks():
    pins = {"torch": "torch==2.10.0 --index-url https://download.pytorch.org/whl/cu128"}
    notes = install_notes(CHECKS, python="/usr/bin/python3", deps="system", pins=pins)
    assert notes == [
        (
            "3 check(s) did not run for want of the module 'torch': install it for the python "
            "the smoke environment is made from: `/usr/bin/python3 -m pip install torch==2.10.0 "
            "--index-url https://download.pytorch.org/whl/cu128` (the fork's pin at the "
            "series' base)"
        ),
        (
            "1 check(s) did not run for want of the module 'yaml': install it for the python "
            "the smoke environment is made from: `/usr/bin/python3 -m pip install pyyaml`"
        ),
    ]
    for c in CHECKS:
        assert "pip install" not in c["detail"]


@pytest.mark.parametrize(
    ("deps", "says"),
    [("none", "--deps none installs nothing but the wheels"), ("index", "the index did not")],
)
def test_the_note_fits_the_deps_mode(deps, says):
    (note, _) = install_notes(CHECKS, python="python3.12", deps=deps, pins={})
    assert says in note and "`python3.12 -m pip install torch`" in note


CUDA_PIN = {"torch": "torch==2.10.0 --index-url https://download.pytorch.org/whl/cu128"}


@pytest.mark.parametrize(
    ("pins", "index_configured", "want"),
    [
        (CUDA_PIN, False, "torch==2.10.0 --index-url https://download.pytorch.org/whl/cpu"),
        (CUDA_PIN, True, "torch==2.10.0`"),  # the index pip is set up with
        (
            {"torch": "torch==2.9.1"},
            False,
            "torch==2.9.1 --index-url https://download.pytorch.org/whl/cpu",
        ),
        ({}, True, "install torch`"),
    ],
)
def test_a_machine_without_cuda_is_told_the_cpu_torch(pins, index_configured, want):
    notes = install_notes(
        CHECKS,
        python="python3",
        deps="system",
        pins=pins,
        cuda=False,
        index_configured=index_configured,
    )
    torch = next(n for n in notes if "'torch'" in n)
    assert want in torch and "/cu128" not in torch
    assert "no CUDA device" in torch and "static" in torch
    # on a CUDA machine the fork's CUDA build stays
    (cuda_note, _) = install_notes(CHECKS, python="python3", deps="system", pins=CUDA_PIN)
    assert "/whl/cu128" in cuda_note and "no CUDA device" not in cuda_note


@pytest.mark.parametrize(
    ("env", "conf", "configured"),
    [
        ({"PIP_INDEX_URL": "https://mirror.example/simple"}, None, True),
        ({}, "[global]\nindex-url = https://mirror.example/simple\n", True),
        ({}, "[global]\ntimeout = 60\n", False),
        ({}, None, False),
    ],
)
def test_the_configured_index_is_found(tmp_path, env, conf, configured):
    from forkpatch.smoke.install import pip_index_configured

    environ = {"HOME": str(tmp_path / "home"), **env}
    if conf is not None:
        environ["PIP_CONFIG_FILE"] = str(tmp_path / "pip.conf")
        (tmp_path / "pip.conf").write_text(conf, encoding="utf-8")
    assert pip_index_configured(environ, system_files=()) is configured
    etc = tmp_path / "etc-pip.conf"
    etc.write_text("[global]\nindex-url = https://mirror.example/simple\n", encoding="utf-8")
    assert pip_index_configured(environ, system_files=(etc,))
