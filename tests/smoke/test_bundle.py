"""The wheelhouse for a GPU machine without network (forkpatch.smoke.bundle): the wheels'
requirements the machine's `pip list --format=freeze` lacks, resolved for its Python
one `pip download --no-deps` at a time, each one's own requirements followed. Here pip is
a stand-in that copies wheels from a local folder (no network), so the resolution
itself is what is tested: what the machine has is skipped, a version it has that does
not satisfy is downloaded, markers are read for the machine's Python, and extras asked
for late still bring what they require (the lent H200 lacked pycountry: mistral_common
asks pydantic-extra-types[pycountry] after fastapi[standard] asked for it plain).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from forkpatch.errors import BuildError
from forkpatch.smoke import bundle
from forkpatch.smoke.env import check_python_fits
from support.wheelfactory import build_wheel

FAKE_PIP = """
import shutil, sys
from pathlib import Path
args = sys.argv[1:]
dest = Path(args[args.index("-d") + 1])
spec = args[-1]
name = spec.split("[")[0].split("<")[0].split(">")[0].split("=")[0].split("!")[0].strip()
repo = Path(sys.argv[0]).parent / "repo"
hits = sorted(repo.glob(name.replace("-", "_") + "-*.whl"))
if not hits:
    print("ERROR: No matching distribution found for " + spec, file=sys.stderr)
    sys.exit(1)
shutil.copy(hits[-1], dest)
"""


@pytest.fixture
def index(tmp_path: Path) -> tuple[Path, list[str]]:
    """A folder of wheels, and the pip command that "downloads" from it."""
    repo = tmp_path / "pip" / "repo"
    repo.mkdir(parents=True)
    (tmp_path / "pip" / "fakepip.py").write_text(FAKE_PIP)
    return repo, [sys.executable, str(tmp_path / "pip" / "fakepip.py")]


def _wheel(repo: Path, name: str, version: str, *requires: str) -> Path:
    repo.mkdir(parents=True, exist_ok=True)
    return build_wheel(repo, {}, name=name, version=version, requires=requires, entry_points=None)


def test_late_extras_missing_and_satisfied_requirements(tmp_path, index):
    repo, pip = index
    _wheel(repo, "fastapi", "1.0", 'pydantic-extra-types>=2; extra == "standard"')
    _wheel(repo, "mistral-common", "1.0", "pydantic-extra-types[pycountry]>=2")
    _wheel(repo, "pydantic-extra-types", "2.1", 'pycountry>=23; extra == "pycountry"')
    _wheel(repo, "pycountry", "26.0")
    _wheel(repo, "numpy", "2.3")
    _wheel(repo, "old-py-only", "1.0")
    fork = _wheel(
        tmp_path / "fork",
        "1cat-vllm",
        "1.2.1",
        "fastapi[standard]",
        "mistral_common",
        "numpy<2.4",
        "pyyaml",
        'old-py-only; python_version < "3.10"',
    )
    have = {"numpy": "2.5.2", "pyyaml": "6.0"}
    saved = bundle.resolve([fork], have, python_version="3.12", dest=tmp_path / "out", pip=pip)
    names = [p.name.split("-")[0] for p in saved]
    assert names == ["fastapi", "mistral_common", "numpy", "pydantic_extra_types", "pycountry"]


def test_keep_installed_takes_the_machines_version(tmp_path, index):
    repo, pip = index
    _wheel(repo, "numpy", "2.3")
    fork = _wheel(tmp_path / "fork", "1cat-vllm", "1.2.1", "numpy<2.4")
    saved = bundle.resolve(
        [fork],
        {"numpy": "2.5.2"},
        python_version="3.12",
        dest=tmp_path / "o",
        keep=["NumPy"],
        pip=pip,
    )
    assert saved == []


def test_a_requirement_with_no_wheel_names_it(tmp_path, index):
    _repo, pip = index
    fork = _wheel(tmp_path / "fork", "1cat-vllm", "1.2.1", "nowhere>=1")
    with pytest.raises(BuildError, match=r"pip download nowhere>=1 for CPython 3\.12 failed"):
        bundle.resolve([fork], {}, python_version="3.12", dest=tmp_path / "o", pip=pip)


@pytest.mark.parametrize(
    ("text", "ok"),
    [("click==8.1.7\nPyYAML==6.0.1\n", True), ("-e git+https://x#egg=y\n", False), ("", False)],
)
def test_the_machines_freeze_is_read_by_name(tmp_path, text, ok):
    path = tmp_path / "freeze.txt"
    path.write_text(text)
    if ok:
        assert bundle.read_freeze(path) == {"click": "8.1.7", "pyyaml": "6.0.1"}
    else:
        with pytest.raises(BuildError, match="pip list --format=freeze"):
            bundle.read_freeze(path)


@pytest.mark.parametrize(
    "name",
    ["w-1.0-py37-none-any.whl", "w-1.0-py3-none-any.whl", "w-1.0-cp37-abi3-linux_x86_64.whl"],
)
def test_a_wheel_for_an_older_python_3_fits_a_newer_one(tmp_path, name):
    """pip installs a py37 wheel on any later 3.x (the H200 run found the smoke refusing
    interegular's py37 wheel on 3.12)."""
    check_python_fits([tmp_path / name], sys.executable)


@pytest.mark.parametrize(
    "name",
    ["w-1.0-py399-none-any.whl", "w-1.0-cp37-cp37m-linux_x86_64.whl", "w-1.0-py2-none-any.whl"],
)
def test_a_wheel_for_a_newer_or_other_python_does_not_fit(tmp_path, name):
    from forkpatch.errors import SmokeError

    with pytest.raises(SmokeError, match="is built for"):
        check_python_fits([tmp_path / name], sys.executable)
