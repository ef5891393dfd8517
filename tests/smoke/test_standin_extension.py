"""A Python-only wheel of the fork has no compiled ``vllm._C``, which vLLM's CUDA
platform imports unconditionally: on a CUDA machine the checks that import vLLM's
platform failed with "No module named 'vllm._C'" (on a CPU they passed). The check
process, and the `vllm --version` it runs, stand in an empty module for it, only where
the wheel has none (a real extension is always found first). Here a synthetic ``vllm``
whose platform module imports ``vllm._C`` as vLLM's CUDA platform does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from forkpatch.smoke import incheck
from forkpatch.smoke.incheck import standin

PLATFORM = "import vllm._C  # as vllm/platforms/cuda.py does\nNAME = 'cuda'\n"
PROBE = (
    "import sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2]); "
    "from forkpatch.smoke.incheck import standin; names = standin.install(); "
    "import vllm.platforms_cuda as p, vllm._C as c; "
    "print(names, p.NAME, getattr(c, standin.MARK, False), getattr(c, 'REAL', False))"
)
SRC = str(Path(incheck.__file__).resolve().parents[3])


def _vllm(tmp_path: Path, *, compiled: str | None) -> Path:
    site = tmp_path / "site"
    pkg = site / "vllm"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "platforms_cuda.py").write_text(PLATFORM)
    if compiled is not None:
        (pkg / compiled).write_text("REAL = True\n")
    return site


def _probe(site: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-I", "-c", PROBE, SRC, str(site)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_a_wheel_without_its_extension_gets_the_stand_in(tmp_path):
    assert _probe(_vllm(tmp_path, compiled=None)) == "['vllm._C'] cuda True False"


@pytest.mark.parametrize("compiled", ["_C.py", "_C.abi3.so.py"])
def test_a_wheel_with_its_extension_keeps_it(tmp_path, compiled):
    """The wheel's own _C (any file named _C.*) is what imports: no stand-in."""
    site = _vllm(tmp_path, compiled=compiled)
    if compiled != "_C.py":
        (site / "vllm" / "_C.py").write_text("REAL = True\n")
    assert _probe(site) == "[] cuda False True"


def test_without_the_stand_in_the_platform_import_fails(tmp_path):
    """What the checks saw on a CUDA machine before (and what a check still sees if the
    stand-in is not installed)."""
    site = _vllm(tmp_path, compiled=None)
    proc = subprocess.run(
        [sys.executable, "-I", "-c", ("import sys; sys.path.insert(0, sys.argv[1]); "
         "import vllm.platforms_cuda"), str(site)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode != 0 and "No module named 'vllm._C'" in proc.stderr


@pytest.mark.parametrize("shadowed", [False, True])
def test_the_sitecustomize_stands_in_for_a_process_of_its_own(tmp_path, shadowed):
    """`vllm --version` runs in a process of its own: the same stand-in through a
    sitecustomize on PYTHONPATH, which still runs the one it shadows."""
    site = _vllm(tmp_path, compiled=None)
    shim = tmp_path / "shim"
    shim.mkdir()
    standin.write_sitecustomize(str(shim), ["vllm._C"])
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['OTHER_RAN'] = '1'\n")
    path = os.pathsep.join([str(shim), str(site)] + ([str(other)] if shadowed else []))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    code = (
        "import os, vllm.platforms_cuda as p, vllm._C as c; "
        f"print(p.NAME, getattr(c, {standin.MARK!r}), os.environ.get('OTHER_RAN'))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["cuda", "True", "1" if shadowed else "None"]


def test_the_report_note_says_what_was_stood_in():
    text = standin.note(["vllm._C"])
    assert "vllm._C" in text and "empty stand-in" in text
