"""The check suite as the smoke venv runs it: the incheck package copied as a unit with
the check ids it reads, launched in isolated mode from that copy alone; and a probe
process of the gpu-jit tier, launched the same way from wherever the package runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from forkpatch.smoke import incheck
from forkpatch.smoke.incheck.registry import this_copy
from forkpatch.smoke.runner import SUITE_PACKAGE, copy_suite


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("ids", [["static.no-such-check"], [], ["gpu-jit.library"]])
def test_the_suite_runs_from_its_copy_alone(tmp_path, ids):
    root = copy_suite(tmp_path / "suite")
    assert not list(root.rglob("__pycache__"))
    spec, out = tmp_path / "spec.json", tmp_path / "results.jsonl"
    spec.write_text(json.dumps({"checks": ids, "version": "1"}), encoding="utf-8")
    argv = incheck.launch_argv(
        sys.executable,
        str(root),
        f"{SUITE_PACKAGE}.__main__",
        "--spec",
        str(spec),
        "--out",
        str(out),
    )
    proc = _run(argv, tmp_path)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    env, checks = records[0], [r for r in records if r["kind"] == "check"]
    assert env["kind"] == "env" and env["sys_path"][0] == str(root)
    # The launcher adds the copy alone to what the interpreter has in isolated mode (an
    # editable install's .pth may put the source tree there: the copy comes first).
    isolated = _run(
        [sys.executable, "-I", "-c", "import json, sys; print(json.dumps(sys.path))"], tmp_path
    )
    assert env["sys_path"][1:] == json.loads(isolated.stdout), env["sys_path"]
    assert not [p for p in env["sys_path"][1:] if p.startswith(str(root))]
    assert [c["id"] for c in checks] == ids
    if ids == ["static.no-such-check"]:
        assert checks[0]["outcome"] == "error" and "unknown check id" in checks[0]["detail"]
    elif ids:  # the copy's registry knows the check and gates it: no PTX library given
        assert checks[0]["outcome"] == "not-run" and checks[0]["detail"]


def test_the_copy_is_forkpatchs_package_and_ids_unchanged(tmp_path):
    root = copy_suite(tmp_path / "suite")
    package = Path(incheck.__file__).parent
    copy = root / SUITE_PACKAGE.replace(".", "/")
    assert sorted(p.name for p in copy.glob("*.py")) == sorted(p.name for p in package.glob("*.py"))
    for path in package.glob("*.py"):
        assert (copy / path.name).read_bytes() == path.read_bytes(), path.name
    ids = root / SUITE_PACKAGE.split(".")[0] / "checkids.py"
    assert ids.read_bytes() == (package.parents[1] / "checkids.py").read_bytes()
    # made afresh: a leftover of an older copy does not survive
    (copy / "stale.py").write_text("raise SystemExit('stale')\n", encoding="utf-8")
    copy_suite(root)
    assert not (copy / "stale.py").exists()


@pytest.mark.parametrize("isolated", [True, False])
def test_a_probe_process_loads_the_library_it_is_given(tmp_path, isolated):
    """The gpu-jit tier's probes (a GEMM that aborts the process, a write past a buffer)
    run in a process of their own: it imports the package from where it runs now and
    takes the library and the probe from its arguments."""
    pytest.importorskip("torch")
    root, package = this_copy()
    assert (Path(root) / package.replace(".", "/") / "gpujit.py").is_file()
    lib = tmp_path / "nowhere" / "libfpsm70.so"
    for probe in ("no_kernel_probe", "unpadded_probe"):
        proc = _run(
            incheck.launch_argv(
                sys.executable, root, f"{package}.gpujit", str(lib), probe, isolated=isolated
            ),
            tmp_path,
        )
        assert proc.returncode != 0
        assert f"PtxLibraryError: PTX library {lib}: no such file" in proc.stderr, proc.stderr
    proc = _run(
        incheck.launch_argv(
            sys.executable, root, f"{package}.gpujit", str(lib), "nope", isolated=isolated
        ),
        tmp_path,
    )
    assert proc.returncode != 0 and "KeyError: 'nope'" in proc.stderr, proc.stderr
