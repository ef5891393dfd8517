"""A patch file a checkout gave CRLF line endings is read as import reads one.

``import`` converts a file with CRLF throughout; the same file in ``patches/`` (a
Windows checkout, ``core.autocrlf=true``) used to conflict in every hunk with a tip
about the base. It is read with LF line endings now, with a warning naming the file,
the likely cause and the ``.gitattributes`` line that prevents it. forkpatch does not
rewrite the team's line endings either way: a file it rewrites (refresh, export, a
rebase) is written back in CRLF; a file it does not rewrite keeps every byte.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from support.cli import fp_in
from support.git import git
from support.projects import copy_example, snapshot
from support.reliability import Row

FP8 = "vllm/model_executor/layers/quantization/online/fp8.py"


def _crlf(path: Path, *, last_newline: bool = True) -> None:
    data = path.read_bytes().replace(b"\n", b"\r\n")
    if not last_newline:
        data = data[:-2]
    path.write_bytes(data)


def _ok(project: Path, *args: str, expect: int = 0) -> tuple[str, str]:
    code, out, err = fp_in(project, *args)
    assert code == expect, f"forkpatch {' '.join(args)} -> {code}\n{out}\n{err}"
    return out, err


# which files of the example series are given CRLF, and how
CASES: dict[str, tuple[tuple[str, ...], bool]] = {
    "one imported mail-form patch": (("capability-floor",), True),
    "one patch whose last line has no line break": (("eager-block-cast",), False),
    "every patch of the series": (
        ("capability-floor", "odd-width-padding", "eager-block-cast", "cli-version"),
        True,
    ),
}


def _statuses(project: Path) -> dict[str, str]:
    out, _ = _ok(project, "status", "--json")
    return {p["name"]: p["status"] for p in json.loads(out)["patches"]}


@pytest.mark.parametrize("case", list(CASES))
def test_a_crlf_patch_applies_as_it_would_with_lf_and_is_named(case, tmp_path):
    ex = copy_example(tmp_path, None)
    names, last_newline = CASES[case]
    for name in names:
        _crlf(ex.patch(name), last_newline=last_newline)
    before = ex.snap()
    code, out, err = fp_in(ex.project, "status", "--json")
    assert code == 0, err
    assert {p["status"] for p in json.loads(out)["patches"]} == {"clean"}, out
    for name in names:
        assert f"patches/{name}.patch: every line ends in CRLF" in err
    assert "core.autocrlf" in err and "patches/*.patch -text" in err
    _ok(ex.project, "apply")
    verdicts = json.loads(_ok(ex.project, "check", "--onto", "v1.3.0", "--json")[0])["patches"]
    assert [p["status"] for p in verdicts] == ["clean", "merged", "clean", "upstreamed"]
    assert ex.snap() == before  # read, never rewritten


def _lf_run(root: Path, crlf: bool) -> dict[str, bytes]:
    """edit + refresh one patch, export, rebase: the files it leaves."""
    ex = copy_example(root, None)
    if crlf:
        for p in sorted((ex.project / "patches").glob("*.patch")):
            _crlf(p)
    _ok(ex.project, "apply")
    _ok(ex.project, "edit", "odd-width-padding")
    with (ex.wt / FP8).open("a", encoding="utf-8") as fh:
        fh.write("# padded\n")
    _ok(ex.project, "refresh")
    _ok(ex.project, "export")
    out = {"after refresh/" + k: v for k, v in ex.snap().items()}
    _ok(ex.project, "rebase", "--onto", "v1.3.0")
    out.update({"after rebase/" + k: v for k, v in ex.snap().items()})
    return {k: v.replace(str(root).encode(), b"ROOT") for k, v in out.items()}


def test_files_forkpatch_rewrites_keep_the_checkouts_crlf(tmp_path):
    lf = _lf_run(tmp_path / "lf", crlf=False)
    crlf = _lf_run(tmp_path / "crlf", crlf=True)
    assert lf.keys() == crlf.keys()
    for key, want in lf.items():
        if key.endswith(".patch"):
            # the same patch, in the checkout's line endings
            assert crlf[key] == want.replace(b"\n", b"\r\n"), key
        else:
            assert crlf[key] == want, key


def test_a_real_autocrlf_checkout_of_the_project(tmp_path):
    """The project committed by one developer, cloned with core.autocrlf=true by another."""
    ex = copy_example(tmp_path / "a", None)
    repo = tmp_path / "team.git"
    git(ex.project, "init", "-q", "-b", "main")
    git(ex.project, "add", "series.yaml", "patches")
    git(ex.project, "commit", "-q", "-m", "series")
    git(tmp_path, "clone", "-q", "--bare", str(ex.project), str(repo))
    clone = tmp_path / "windows"
    git(tmp_path, "-c", "core.autocrlf=true", "clone", "-q", str(repo), str(clone))
    git(clone, "config", "core.autocrlf", "true")
    patch = clone / "patches" / "odd-width-padding.patch"
    assert b"\r\n" in patch.read_bytes()
    before = snapshot(clone)
    assert set(_statuses(clone).values()) == {"clean"}
    _ok(clone, "apply")
    _ok(clone, "edit", "odd-width-padding")
    with (clone / ".forkpatch" / "worktree" / FP8).open("a", encoding="utf-8") as fh:
        fh.write("# padded\n")
    _ok(clone, "refresh")
    after = snapshot(clone)
    changed = {k for k in after if after[k] != before[k]}
    assert changed == {"patches/odd-width-padding.patch"}
    assert b"\n" not in after["patches/odd-width-padding.patch"].replace(b"\r\n", b"")
    # git, converting as the checkout says, sees exactly that one file changed.
    assert git(clone, "status", "--porcelain") == "M patches/odd-width-padding.patch"
    shutil.rmtree(tmp_path / "a", ignore_errors=True)


RELIABILITY = [
    Row(
        "the user's environment",
        "patch files with CRLF throughout in patches/ (a Windows checkout, "
        "core.autocrlf=true): one, one without a final line break, all; a real clone",
        f"{len(CASES)} cases x (status, apply, check --onto) + refresh/export/rebase + "
        "1 autocrlf clone",
        "read as import reads them (no false conflicts), named in a warning with the "
        ".gitattributes fix; rewritten files keep CRLF, the others every byte",
    ),
]
