"""A wheel built for another Python than the smoke interpreter is refused before any
virtual environment is made, naming both (pip's "not a supported wheel" came after
minutes of set-up and named neither)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from forkpatch.errors import SmokeError
from forkpatch.smoke.env import check_python_fits, python_version

HERE = f"{sys.version_info[0]}{sys.version_info[1]}"
OTHER = f"3{sys.version_info[1] + 1}"


@pytest.mark.parametrize(
    ("name", "fits"),
    [
        (f"1cat_vllm-1.2.1-cp{HERE}-cp{HERE}-linux_x86_64.whl", True),
        (f"1cat_vllm-1.2.1-cp{OTHER}-cp{OTHER}-linux_x86_64.whl", False),
        ("1cat_vllm-1.2.1-py3-none-any.whl", True),
        ("1cat_vllm-1.2.1-py2.py3-none-any.whl", True),
        ("1cat_vllm-1.2.1-py2-none-any.whl", False),
        ("1cat_vllm-1.2.1-cp38-abi3-linux_x86_64.whl", True),
        (f"1cat_vllm-1.2.1-cp{OTHER}-abi3-linux_x86_64.whl", False),
        (f"1cat_vllm-1.2.1-pp{HERE}-pypy{HERE}_pp73-linux_x86_64.whl", False),
    ],
)
def test_wheel_tags_against_this_interpreter(name, fits):
    if fits:
        check_python_fits([Path(name)], sys.executable)
        return
    with pytest.raises(SmokeError) as exc:
        check_python_fits([Path(name)], sys.executable)
    assert name in exc.value.message and f"Python {sys.version_info[0]}.{sys.version_info[1]}" in (
        exc.value.message
    )
    assert "--python" in exc.value.tip


def _other_python() -> str | None:
    """A working Python 3 of another minor version than this one, if the machine has one."""
    candidates = [shutil.which(f"python3.{m}") for m in range(8, 15)]
    candidates += [str(p) for p in sorted(Path.home().glob(".pyenv/versions/3.*/bin/python3"))]
    for cand in filter(None, candidates):
        got = python_version(cand, timeout=30)
        if got is not None and got != sys.version_info[:2]:
            return cand
    return None


def test_another_interpreter_is_asked_its_version():
    other = _other_python()
    if other is None:
        pytest.skip("no Python 3 of another version on this machine")
    wheel = Path(f"1cat_vllm-1.2.1-cp{HERE}-cp{HERE}-linux_x86_64.whl")
    with pytest.raises(SmokeError) as exc:
        check_python_fits([wheel], other)
    assert other in exc.value.message and wheel.name in exc.value.message


def test_an_interpreter_that_does_not_run_is_named(tmp_path):
    with pytest.raises(SmokeError) as exc:
        check_python_fits([Path("x-1-py3-none-any.whl")], str(tmp_path / "no-python"))
    assert "no-python" in exc.value.message
