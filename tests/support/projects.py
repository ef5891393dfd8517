"""Projects to run forkpatch on, and what the user owns in them.

The example fork (plus a project with the example series imported) is built
once per test session and copied for every test with ``shutil.copytree``
(:func:`copy_example`): a test may move tags in its copy of the fork without
disturbing the others. :func:`scratch_project` and :func:`project_with_patches`
put a project on a scratch fork; :func:`scenario_factory` makes a series on a
scratch fork and later upstream releases (the rebase tests).
"""

from __future__ import annotations

import atexit
import json
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from forkpatch.project import Project
from forkpatch.series import PatchEntry, Series, load_series
from support.cli import Runner, fp_in
from support.git import ScratchRepo, numbered, replace_once

EXAMPLE_NAMES = ["capability-floor", "odd-width-padding", "eager-block-cast", "cli-version"]
TMP_NAME = re.compile(r"\A\..+(?:\.forkpatch-tmp|\.forkpatch-\d+\.tmp)\Z")
OWNED = ("series.yaml", "patches", "dist")
DIST_INFO_STEP = PatchEntry(
    name="vllm-dist-info",
    build_step="vllm-dist-info",
    summary="version('vllm') reads the wheel's version",
)

_TEMPLATE: Path | None = None


def _template() -> Path:
    """fork/ (the example fork), incoming/ (format-patch files), project/ (imported)."""
    global _TEMPLATE
    if _TEMPLATE is None:
        root = Path(tempfile.mkdtemp(prefix="forkpatch-template-"))
        atexit.register(shutil.rmtree, root, True)
        example_project(root)
        _TEMPLATE = root
    return _TEMPLATE


def example_project(
    root: Path,
    *,
    fork_name: str | None = None,
    build_step: bool = False,
    keep_tags: bool = True,
) -> tuple[Path, Project]:
    """The example fork at ``root/fork``, its series as format-patch files in
    ``root/incoming`` and a project on v1.2.1 with them imported at ``root/project``
    (``build_step``: and the vllm-dist-info build step; ``keep_tags=False``: v1.3.0's
    commit on main, not tagged). Returns (the fork, the project)."""
    from forkpatch.example import make_fork, write_example_patches
    from forkpatch.importer import import_patches
    from forkpatch.ops import init_project

    fork = make_fork(root / "fork").path
    if not keep_tags:
        ScratchRepo(fork, init=False).git("tag", "-d", "v1.3.0")
    incoming = write_example_patches(fork, "v1.2.1", root / "incoming")
    project = init_project(
        root / "project",
        fork_url=str(fork),
        base_tag="v1.2.1",
        fork_name=fork_name,
        distribution="1cat-vllm",
        fork_override=None,
    )
    import_patches(project, incoming)
    if build_step:
        series = project.series
        project.save_series(series.with_patches([*series.patches, DIST_INFO_STEP]))
    return fork, project


@dataclass
class Example:
    root: Path
    fork: ScratchRepo
    project: Path
    incoming: list[Path]
    run: Runner

    @property
    def wt(self) -> Path:
        return self.project / ".forkpatch" / "worktree"

    def snap(self) -> dict[str, bytes]:
        return snapshot(self.project)

    def patch(self, name: str) -> Path:
        return self.project / "patches" / f"{name}.patch"


def copy_example(dest: Path, capsys, *, with_project: bool = True) -> Example:
    """A private copy of the template; series.yaml's fork.url points at the copy's fork."""
    src = _template()
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src / "fork", dest / "fork", symlinks=True)
    shutil.copytree(src / "incoming", dest / "incoming")
    project = dest / "project"
    if with_project:
        shutil.copytree(src / "project", project, symlinks=True)
        series = project / "series.yaml"
        series.write_text(series.read_text().replace(str(src / "fork"), str(dest / "fork")))
        # The store borrows the fork's objects: point it at this copy (ForkRepo
        # would rewrite the line itself; doing it here keeps the copy self-contained).
        alt = project / ".forkpatch" / "repo.git" / "objects" / "info" / "alternates"
        alt.write_text(f"{(dest / 'fork' / '.git' / 'objects').resolve()}\n")
    else:
        project.mkdir()
    return Example(
        root=dest,
        fork=ScratchRepo(dest / "fork", init=False),
        project=project,
        incoming=sorted((dest / "incoming").glob("*.patch")),
        run=Runner(project, capsys),
    )


def scratch_fork(path: Path, files: Mapping[str, str | bytes], *, tag: str = "v1") -> ScratchRepo:
    """A real git repository with ``files`` committed and tagged ``tag``."""
    fork = ScratchRepo(path)
    for rel, content in files.items():
        fork.add_file(rel, content)
    fork.commit("base")
    fork.tag(tag)
    return fork


def scratch_project(
    tmp_path: Path, capsys, files: Mapping[str, str | bytes], *, tag: str = "v1"
) -> tuple[ScratchRepo, Path, Runner]:
    """A scratch fork holding ``files`` tagged ``tag``, and an initialised project on it."""
    fork = scratch_fork(tmp_path / "fork", files, tag=tag)
    project = tmp_path / "project"
    project.mkdir()
    run = Runner(project, capsys)
    run("init", "--fork-url", str(fork.path), "--base", tag)
    return fork, project, run


def project_with_patches(
    tmp_path: Path, files: Mapping[str, str], patches: list[tuple[str, str]]
) -> tuple[Path, Path]:
    """(project, fork): a project on a scratch fork at v1 with ``patches`` (name, diff)
    written straight into patches/ and series.yaml (nothing checks them on the way)."""
    fork = scratch_fork(tmp_path / "fork", files).path
    project = tmp_path / "project"
    project.mkdir()
    code, _, err = fp_in(project, "init", "--fork-url", str(fork), "--base", "v1")
    assert code == 0, err
    series = (project / "series.yaml").read_text().replace("patches: []\n", "patches:\n")
    for name, text in patches:
        (project / "patches" / f"{name}.patch").write_text(f"Patch {name}.\n\n{text}")
        series += f"  - name: {name}\n    file: {name}.patch\n    summary: {name}\n"
    (project / "series.yaml").write_text(series)
    return project, fork


# ----------------------------------------------------------------------------- rebase scenarios

LINES = numbered(40)  # what a scenario's files are made of


@dataclass
class Scenario:
    fork: ScratchRepo
    project: Path
    run: Runner

    def check(self, onto: str, *extra: str, expect: int | None = 0) -> dict:
        _, out, _ = self.run("check", "--onto", onto, "--json", *extra, expect=expect)
        return json.loads(out)

    def statuses(self, onto: str, *extra: str, expect: int | None = 0) -> dict[str, str]:
        return {p["name"]: p["status"] for p in self.check(onto, *extra, expect=expect)["patches"]}

    def patch(self, name: str) -> str:
        return (self.project / "patches" / f"{name}.patch").read_text()


def format_patches(repo: Path | str, revs: str, out: Path) -> list[Path]:
    """``git format-patch`` of ``revs`` into ``out``, as forkpatch import reads them."""
    ScratchRepo(Path(repo), init=False).git(
        "format-patch", "-q", "--zero-commit", "--no-signature", "-o", str(out), revs
    )
    return sorted(out.glob("*.patch"))


def scenario_factory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Callable[..., Scenario]:
    """Build a fork at tag v1, a project on v1 with ``patches`` (name -> {path: text}),
    then let ``upstream`` (a callable on the ScratchRepo) make and tag later versions."""

    def make(
        files: Mapping[str, str],
        patches: list[tuple[str, Mapping[str, str | None]]],
        upstream: Callable[[ScratchRepo], None] | None = None,
    ) -> Scenario:
        fork = ScratchRepo(tmp_path / "fork")
        for rel, text in files.items():
            fork.add_file(rel, text)
        fork.commit("initial")
        fork.tag("v1")
        fork.git("checkout", "-q", "-b", "series")
        for name, edits in patches:
            for rel, text in edits.items():
                if text is None:
                    fork.remove_file(rel)
                else:
                    fork.add_file(rel, text)
            # A forkpatch work tree's commit (the trailer names the patch on import).
            fork.commit(f"{name}: {name} summary\n\nWhy {name}.\n\nForkpatch-Patch: {name}")
        incoming = format_patches(fork.path, "v1..series", tmp_path / "incoming")
        fork.git("checkout", "-q", "main")
        if upstream is not None:
            upstream(fork)
        project = tmp_path / "project"
        project.mkdir()
        run = Runner(project, capsys)
        run("init", "--fork-url", str(fork.path), "--base", "v1")
        if patches:
            run("import", *map(str, incoming))
        return Scenario(fork, project, run)

    return make


def three_patch_stack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[Path, Runner, Path, Path]:
    """A work tree with three patches on one file f.txt: low (line 3), mid (line 20),
    high (line 5, near low); (project, run, work tree, f.txt)."""
    _fork, project, run = scratch_project(tmp_path, capsys, {"f.txt": numbered(40)})
    run("apply")
    wt = project / ".forkpatch" / "worktree"
    f = wt / "f.txt"
    for name, old, new in (
        ("low", "line 3\n", "LINE 3\n"),
        ("mid", "line 20\n", "LINE 20\n"),
        ("high", "line 5\n", "line five\n"),
    ):
        run("new", name)
        f.write_text(f.read_text().replace(old, new))
        run("refresh")
    return project, run, wt, f


def one_line_conflict(make: Callable[..., Scenario], line: int = 9) -> Scenario:
    """``make`` (:func:`scenario_factory`'s) of a project on v1 whose one patch p1 edits
    ``line N`` of a.py, and a v2 where upstream edited the same line: a rebase onto v2
    stops on p1."""

    def upstream(fork: ScratchRepo) -> None:
        fork.add_file("a.py", replace_once(LINES, f"line {line}\n", f"line {line} upstream\n"))
        fork.commit(f"Upstream edits line {line}")
        fork.tag("v2")

    ours = replace_once(LINES, f"line {line}\n", f"line {line} ours\n")
    return make({"a.py": LINES}, [("p1", {"a.py": ours})], upstream)


# ----------------------------------------------------------------------------- what the user owns


def own_file_series(
    n: int, lines: str
) -> tuple[dict[str, str], list[tuple[str, dict[str, str | None]]]]:
    """The files and patches of a series of ``n`` patches p00.., each changing line 20
    of its own file m00.py.. (each file ``lines``): for :func:`scenario_factory`."""
    files = {f"m{i:02d}.py": lines for i in range(n)}
    patches: list[tuple[str, dict[str, str | None]]] = [
        (f"p{i:02d}", {f"m{i:02d}.py": replace_once(lines, "line 20\n", f"line 20 p{i}\n")})
        for i in range(n)
    ]
    return files, patches


def snapshot(project: Path) -> dict[str, bytes]:
    """Bytes of series.yaml and every file in patches/ (to assert nothing changed)."""
    out = {"series.yaml": (project / "series.yaml").read_bytes()}
    for p in sorted((project / "patches").rglob("*")):
        if p.is_file():
            out[str(p.relative_to(project))] = p.read_bytes()
    return out


def mtimes(project: Path) -> dict[str, int]:
    """mtime_ns of series.yaml and every patch file."""
    paths = [project / "series.yaml", *sorted((project / "patches").rglob("*"))]
    return {str(p.relative_to(project)): p.stat().st_mtime_ns for p in paths if p.is_file()}


def load(project: Path) -> Series:
    return load_series(project / "series.yaml")


def visible(project: Path) -> dict[str, bytes]:
    """Bytes of series.yaml, patches/** and dist/** (temporary files left out)."""
    out: dict[str, bytes] = {}
    for name in OWNED:
        p = project / name
        if p.is_file():
            out[name] = p.read_bytes()
        elif p.is_dir():
            for f in sorted(p.rglob("*")):
                rel = f.relative_to(project)
                if f.is_file() and not any(
                    TMP_NAME.match(part) or part.startswith(".forkpatch-stage-")
                    for part in rel.parts
                ):
                    out[rel.as_posix()] = f.read_bytes()
    return out


def leftovers(project: Path) -> list[str]:
    """Temporary files or staging directories forkpatch left in what the user owns."""
    found = []
    for d in (project, project / "patches", project / "dist"):
        if d.is_dir():
            for f in d.iterdir():
                if TMP_NAME.match(f.name) or f.name.startswith(".forkpatch-stage-"):
                    found.append(f.relative_to(project).as_posix())
    return sorted(found)


def temp_files(root: Path) -> list[str]:
    """Every temporary file or staging directory of forkpatch's writers anywhere under
    ``root`` (state files, work trees and index directories included)."""
    return sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob(".*")
        if TMP_NAME.match(p.name) or p.name.startswith(".forkpatch-stage-")
    )


class Stash:
    """A scenario kept aside and put back at the same absolute path for every run
    (git worktrees and state.json hold absolute paths, so copies must live where the
    original did)."""

    def __init__(self, live: Path) -> None:
        self.live = live
        self.saved = live.parent / (live.name + ".stash")
        if self.saved.exists():
            shutil.rmtree(self.saved)
        shutil.copytree(live, self.saved, symlinks=True)

    def restore(self) -> Path:
        if self.live.exists():
            shutil.rmtree(self.live)
        shutil.copytree(self.saved, self.live, symlinks=True)
        return self.live
