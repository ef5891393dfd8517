"""README.md's workflow, step by step, on the repository's own series and the real fork.

Every command below is one the README shows, in its order: the daily workflow,
building wheels, smoke tests and publishing; rebasing onto a new fork release
comes last here (the build overlays the fork's v1.2.1 wheel, so it must run
while the series is on v1.2.1). After each step the test asserts exactly which
files of patches/ and series.yaml changed. When the README changes, this test
changes with it.

The fork is FORKPATCH_FORK_REPO or the fixture (realkit); as the README says, a
local clone is named with FORKPATCH_FORK_REPO and fork.url stays the public URL.
The build uses the fixture's Python-only v1.2.1 wheel as the released wheel. The
smoke, publish and install steps need the fork's requirements and CPU torch in
this interpreter (`bash tests/support/setup-real-fork.sh`); without them the test skips
at that point, after every other step ran, naming what is missing.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support import realfork
from support.cli import Runner
from support.cli import env as cli_env
from support.git import git
from support.projects import snapshot
from support.venvs import make_venv_seeing_this_one

pytestmark = [pytest.mark.real_fork, pytest.mark.slow]

FP8 = "vllm/model_executor/layers/quantization/online/fp8.py"
PUBLIC_URL = "https://github.com/1CatAI/1Cat-vLLM.git"


class Walk:
    """Runs README commands in the project; each step states the files it changes."""

    def __init__(self, project: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.project = project
        self.run = Runner(project, capsys)
        self.wt = project / ".forkpatch" / "worktree"

    def step(self, *args: str, changes: set[str] = frozenset(), expect: int = 0) -> tuple[str, str]:
        before = snapshot(self.project)
        _code, out, err = self.run(*args, expect=expect)
        after = snapshot(self.project)
        changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
        assert changed == set(changes), f"forkpatch {' '.join(args)} changed {changed}\n{err}"
        if "series.yaml" in changed:
            self.check_series_diff(args, before["series.yaml"], after["series.yaml"])
        return out, err

    @staticmethod
    def check_series_diff(args: tuple[str, ...], before: bytes, after: bytes) -> None:
        """A command that rewrites series.yaml changes only what it is about: the
        text it does not touch (the multi-line why: blocks) keeps its form."""
        old, new = before.decode().splitlines(), after.decode().splitlines()
        removed = [ln for ln in old if ln not in new]
        assert not re.search(r'^ +(why|origin): ".*\\n', after.decode(), re.M), after.decode()
        if args[0] == "new":
            assert removed == [], removed
        if args[0] not in ("rebase", "delete"):  # those drop whole entries
            assert len(removed) <= 12, f"forkpatch {' '.join(args)} rewrote series.yaml: {removed}"

    def git(self, *args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(self.wt), *args], check=True, capture_output=True, text=True
        ).stdout

    def top(self) -> str:
        return self.run("top")[1].strip()


def _lines(patch: Path, path: str, sign: str) -> list[str]:
    """The ``sign`` ('+', '-' or ' ') lines of ``patch``'s section for ``path``."""
    out, inside = [], False
    for line in patch.read_text().splitlines():
        if line.startswith("diff --git "):
            inside = line.endswith(f" b/{path}")
        elif inside and line.startswith(sign) and not line.startswith(("+++", "---")):
            out.append(line[1:])
    return out


def _line_away_from(final: str, candidates: list[str], above: Path) -> str:
    """A line among ``candidates`` after which a new line lands outside every hunk (and
    its context) of the patch ``above``, in ``final`` (the file at the top of the stack)."""
    spans = [
        (int(m[1]), int(m[2] or 1))
        for m in re.finditer(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", above.read_text(), re.M)
    ]
    lines = final.splitlines()
    for cand in candidates:
        if not cand.strip() or lines.count(cand) != 1:
            continue
        at = lines.index(cand) + 2  # 1-based number of the inserted line
        if all(not (start - 1 <= at <= start + count) for start, count in spans):
            return cand
    raise AssertionError("no line of the patch is clear of the patch above")


def _resolve_taking_the_patch(path: Path) -> None:
    """Resolve diff3 conflict markers by keeping the patch's side."""
    text = path.read_text()
    pattern = re.compile(r"^<{7} .*?\n.*?^={7}\n(.*?)^>{7} .*?\n", re.S | re.M)
    assert pattern.search(text), "no conflict markers"
    path.write_text(pattern.sub(lambda m: m[1], text))


def test_readme_workflow_on_the_real_series(tmp_path, capsys, monkeypatch):
    fork = realfork.fork_or_skip()
    realfork.tags_or_skip("v1.2.1", "v1.2.2", "v1.3.0")
    # README: "export FORKPATCH_FORK_REPO=~/src/1Cat-vLLM" (a local clone: no network).
    monkeypatch.setenv("FORKPATCH_FORK_REPO", fork)

    # forkpatch init --fork-url https://github.com/1CatAI/1Cat-vLLM.git --base v1.2.1
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    Runner(fresh, capsys)("init", "--fork-url", PUBLIC_URL, "--base", "v1.2.1")
    made = yaml.safe_load((fresh / "series.yaml").read_text())
    ours = yaml.safe_load((realfork.REPO_ROOT / "series.yaml").read_text())
    assert made["base"] == ours["base"] and made["fork"]["url"] == PUBLIC_URL
    assert (fresh / ".gitignore").read_text().splitlines() == [".forkpatch/", "dist/"]

    # The repository's own series, as a team's repository (team.git) that this project
    # and a teammate's clone pull from and push to.
    seed = tmp_path / "seed"
    seed.mkdir()
    shutil.copy2(realfork.REPO_ROOT / "series.yaml", seed / "series.yaml")
    shutil.copytree(realfork.REPO_ROOT / "patches", seed / "patches")
    (seed / ".gitignore").write_text(".forkpatch/\ndist/\n")
    git(tmp_path, "init", "-q", "-b", "main", str(seed))
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "the series")
    git(tmp_path, "clone", "-q", "--bare", str(seed), str(tmp_path / "team.git"))
    project, teammate = tmp_path / "project", tmp_path / "teammate"
    for clone in (project, teammate):
        git(tmp_path, "clone", "-q", str(tmp_path / "team.git"), str(clone))
    w = Walk(project, capsys)
    names = [p["name"] for p in ours["patches"]]
    files = {p["name"]: f"patches/{p['file']}" for p in ours["patches"] if "file" in p}

    # forkpatch status / apply
    out, _ = w.step("status", "--json")
    assert {p["status"] for p in json.loads(out)["patches"]} == {"clean"}
    w.step("apply")
    assert w.git("status", "--porcelain") == ""  # placeholder blobs do not show
    assert w.top() == names[-1]

    # forkpatch edit odd-width-padding; change its lines; refresh: one file changes, the
    # patch above in the same file (packed-repack) only moved and is not rewritten.
    fp8 = w.wt / FP8
    anchor = _line_away_from(
        fp8.read_text(),
        _lines(project / files["odd-width-padding"], FP8, "+"),
        project / files["packed-repack"],
    )
    w.step("edit", "odd-width-padding")
    text = fp8.read_text()
    assert anchor + "\n" in text
    fp8.write_text(text.replace(anchor + "\n", anchor + "\n# reviewed for Qwen3.5 at TP4\n", 1))

    # The team: a teammate's commit to patches/ (a description line of the patch below
    # the one being edited) arrives by `git pull` in the middle of the edit. status
    # names it and the side that changed; export refuses to write over it.
    floor = teammate / files["capability-floor"]
    first = floor.read_text().splitlines()[0]
    team_line = f"{first} (reviewed by the team)"
    floor.write_text(floor.read_text().replace(first, team_line, 1))
    git(teammate, "commit", "-q", "-am", "capability-floor: say who reviewed it")
    git(teammate, "push", "-q", "origin", "main")
    git(project, "pull", "-q", "--ff-only")
    assert team_line in (project / files["capability-floor"]).read_text()
    out, err = w.step("status", "--json")
    assert {(c["name"], c["kind"], c["side"]) for c in json.loads(out)["changes"]} == {
        ("capability-floor", "modified", "file"),
        ("odd-width-padding", "edited", "worktree"),
    }
    _, err = w.step("export", expect=1)
    assert f"{files['capability-floor']} was modified outside forkpatch" in err
    assert "nothing was written" in err

    _, err = w.step("refresh", changes={files["odd-width-padding"]})
    assert "packed-repack" in err and "line numbers moved" in err
    assert w.top() == names[-1]  # the patches above are back
    # The work tree has no edits of its own left: apply takes the teammate's file.
    _, err = w.step("apply")
    assert "takes into the work tree" in err and "capability-floor" in err
    assert team_line in w.git("log", "--format=%B", "--grep", "Forkpatch-Patch: capability-floor")
    assert team_line in (project / files["capability-floor"]).read_text()
    out, _ = w.step("status", "--json")
    assert {p["name"]: p["status"] for p in json.loads(out)["patches"]}["packed-repack"] == "offset"

    # forkpatch new my-fix; $EDITOR ...; refresh
    w.step("new", "my-fix", changes={"series.yaml", "patches/my-fix.patch"})
    (w.wt / "vllm" / "v100_notes.py").write_text('"""Notes for V100 operators."""\n')
    w.step("refresh", changes={"patches/my-fix.patch"})
    assert "+++ b/vllm/v100_notes.py" in (project / "patches" / "my-fix.patch").read_text()

    # forkpatch rename OLD NEW | move NAME --after OTHER | delete NAME
    w.step(
        "rename",
        "my-fix",
        "v100-notes",
        changes={"series.yaml", "patches/my-fix.patch", "patches/v100-notes.patch"},
    )
    w.step("move", "v100-notes", "--after", "capability-floor", changes={"series.yaml"})
    assert w.top() == names[-1]
    w.step("pop", "v100-notes")
    w.step("delete", "v100-notes", changes={"series.yaml", "patches/v100-notes.patch"})

    # forkpatch pop --all | push --all | top; export (zero bytes)
    w.step("pop", "--all")
    w.step("push", "--all")
    assert w.top() == names[-1]
    out, err = w.step("export")
    assert "0 patch file(s) changed" in out and "uncommitted" not in err

    # A conflict made by editing a lower patch, and its resolution: capability-floor now
    # also changes a line of the fork that odd-width-padding changes.
    w.step("edit", "capability-floor")
    theirs = _lines(project / files["odd-width-padding"], FP8, "-")[0]
    text = fp8.read_text()
    assert theirs + "\n" in text
    fp8.write_text(text.replace(theirs + "\n", theirs + "  # lower-patch edit\n", 1))
    _, err = w.step("refresh", expect=3)
    assert "odd-width-padding" in err and "nothing in patches/ was changed" in err
    w.step("refresh", "--force", changes={files["capability-floor"]})
    _, err = w.step("push", "--merge", expect=3)
    assert "odd-width-padding" in err and "conflict markers" in err
    _resolve_taking_the_patch(fp8)
    w.step("refresh", changes={files["odd-width-padding"]})
    w.step("push", "--all")
    assert w.top() == names[-1]
    w.step("export")

    # Building wheels (overlay on the fork's released wheel), verify.
    out, _ = w.step(
        "build-wheel",
        "--mode",
        "overlay",
        "--base-wheel",
        str(realfork.fixture_wheel_or_skip()),
        "--json",
    )
    built = json.loads(out)
    (wheel,) = (Path(x) for x in built["wheels"])
    assert wheel.parent == project / "dist" and built["version"].startswith("1.2.1+fp.")
    w.step("verify", str(wheel))

    # A team's deploy line: smoke, and only on success restart the service. Without
    # torch in the smoke environment (--deps none) no tier ran fully: exit 5, and the
    # deploy does not happen; neither when sm70 (the default --tier) cannot run here.
    before = snapshot(project)
    for extra in (["--deps", "none"], ["--deps", "none", "--tier", "static"]):
        piped = subprocess.run(
            [
                "bash",
                "-c",
                f'"$0" -m forkpatch smoke "$1" {" ".join(extra)} && echo deployed',
                sys.executable,
                str(wheel),
            ],
            cwd=project,
            env=cli_env(FORKPATCH_FORK_REPO=fork),
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        assert piped.returncode == 5, piped.stderr[-3000:]
        assert "deployed" not in piped.stdout, piped.stdout
        assert "error: tier static ran incomplete" in piped.stderr, piped.stderr[-3000:]
        assert piped.stderr.count("pip install torch==") == 1, piped.stderr[-3000:]
    assert snapshot(project) == before  # a smoke changes nothing the user made

    # Smoke tests and publishing, then pip install back from the published directory.
    missing = realfork.missing_modules(realfork.FORK_MODULES)
    if not missing:
        out, err = w.step("smoke", str(wheel), "--tier", "static", "--json")
        report = json.loads(out)
        assert report["tiers"]["status"]["static"] == "passed", report["tiers"]
        index = tmp_path / "index"
        out, _ = w.step("publish", str(wheel), "--to", str(index), "--allow-missing-tier", "sm70")
        line = next(ln for ln in out.splitlines() if ln.startswith("install: pip install "))
        consumer = make_venv_seeing_this_one(tmp_path / "consumer")
        args = line.removeprefix("install: pip install ").replace("'", "").split()
        res = subprocess.run(
            [str(consumer), "-m", "pip", "install", "-q", *args],
            capture_output=True,
            text=True,
            check=False,
        )
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        got = subprocess.run(
            [str(consumer), "-c", "import importlib.metadata as m; print(m.version('vllm'))"],
            capture_output=True,
            text=True,
            check=True,
            cwd=tmp_path,
        ).stdout.strip()
        assert got == built["version"]

    # Team step: a rebase stopped at a conflict, and an edit made meanwhile in the editing
    # work tree (not in the conflict work tree): nothing is lost. team-note changes a line
    # of vllm/version.py that v1.3.0 rewrites, so the rebase stops there.
    w.step("new", "team-note", changes={"series.yaml", "patches/team-note.patch"})
    version = w.wt / "vllm" / "version.py"
    old_note = "    # Note - this won't do the right thing when we release 1.0!\n"
    assert old_note in version.read_text()
    version.write_text(version.read_text().replace(old_note, "    # Note - the team's 1.0 fix\n"))
    w.step("refresh", changes={"patches/team-note.patch"})
    _, err = w.step("rebase", "--onto", "v1.3.0", expect=3)
    assert "patch 'team-note' does not apply to v1.3.0" in err, err
    notes = w.wt / "vllm" / "team_notes.txt"  # the editing work tree, not the conflict's
    notes.write_text("ask upstream about the 1.0 check\n")
    # --continue before the conflict is resolved: said so; a step that stops again does
    # not touch the editing work tree, so the edit there stays where it is.
    _, err = w.step("rebase", "--continue", expect=3)
    assert "conflict markers remain in vllm/version.py" in err, err
    assert notes.read_text() == "ask upstream about the 1.0 check\n"
    # --skip drops team-note, the last patch: the rebase would end and rebuild the
    # editing work tree, so it is refused, the edit named.
    _, err = w.step("rebase", "--skip", expect=1)
    assert "vllm/team_notes.txt (new, untracked)" in err and "rebase --abort" in err, err
    _, err = w.step("rebase", "--abort")
    assert "are kept" in err and "vllm/team_notes.txt" in err, err
    assert notes.read_text() == "ask upstream about the 1.0 check\n"
    notes.unlink()
    w.step("pop")
    w.step("delete", "team-note", changes={"series.yaml", "patches/team-note.patch"})

    # Rebasing onto a new fork release: check, then rebase.
    out, _ = w.step("check", "--onto", "v1.2.2", "--json")
    assert {p["status"] for p in json.loads(out)["patches"]} <= {"clean", "offset", "merged"}
    out, _ = w.step("check", "--onto", "v1.3.0", "--json")
    status = {p["name"]: p["status"] for p in json.loads(out)["patches"]}
    assert status["cli-version"] == "upstreamed"
    # The rebase drops cli-version and writes the new line numbers of patches that
    # only moved (packed-repack, since the edit of odd-width-padding above).
    moved = {files[n] for n, s in status.items() if s == "offset"}
    assert files["packed-repack"] in moved
    out, _ = w.step(
        "rebase",
        "--onto",
        "v1.3.0",
        "--json",
        changes={"series.yaml", files["cli-version"], *moved},
    )
    assert {p["name"]: p["status"] for p in json.loads(out)["patches"]}["cli-version"] == (
        "upstreamed"
    )
    assert not (project / files["cli-version"]).exists()
    assert "tag: v1.3.0" in (project / "series.yaml").read_text()
    reports = project / ".forkpatch" / "reports"
    assert (reports / "rebase-v1.2.1-to-v1.3.0.md").is_file()
    assert (reports / "rebase-v1.2.1-to-v1.3.0.json").is_file()
    assert w.git("status", "--porcelain") == ""
    w.step("export")
    assert team_line in (project / files["capability-floor"]).read_text()

    # A series rebased onto a commit no tag names (README: "--onto takes ... a commit
    # id"): the fork's head past v1.3.0. series.yaml records the commit and no tag; every
    # later command works on it.
    head = git(Path(realfork.git_dir(fork)), "rev-parse", "refs/heads/main^{commit}")
    out, err = w.step("check", "--onto", head, "--json")
    if "which no tag names" not in err:
        pytest.skip(f"the fork's main ({head[:12]}) is tagged: no commit-based series to walk")
    moved = {files[p["name"]] for p in json.loads(out)["patches"] if p["status"] == "offset"}
    w.step("rebase", "--onto", head, changes={"series.yaml", *moved})
    base = yaml.safe_load((project / "series.yaml").read_text())["base"]
    assert base == {"commit": head}, base
    _, err = w.step("status")
    assert "warning" not in err and "fetch --tags" not in err, err
    # track: no release past the one the base counts from (v1.3.0); no "track.pattern".
    out, err = w.step("track", "--json", "--no-forecast")
    assert json.loads(out)["newer"] == [] and "track.pattern" not in err, err
    # forkpatch base-wheel: the fork's Python-only wheel at that commit (README,
    # "Building wheels"), then build-wheel takes it (auto mode: overlay).
    realfork.modules_or_skip((*realfork.BUILD_MODULES, "torch"))
    out, _ = w.step("base-wheel", "--json")
    made = json.loads(out)
    assert re.fullmatch(rf"\d+\.\d+\.\d+\.dev\d+\+g{head[:12]}", made["version"]), made
    if head.startswith("ae13773a0dee"):  # the fixture's main: 8 commits past v1.3.0
        assert made["version"] == "1.3.1.dev8+gae13773a0dee"
    out, _ = w.step("build-wheel", "--json")
    built = json.loads(out)
    assert built["mode"] == "overlay" and built["version"].startswith(made["version"] + ".fp.")
    assert built["provenance"]["commit"] == head and built["provenance"]["tag"] == ""
    w.step("verify", built["wheels"][0])
    if missing:
        pytest.skip(
            f"smoke, publish and pip install not run: {', '.join(missing)} missing "
            f"(`bash tests/support/setup-real-fork.sh`)"
        )
