"""End to end on loopback: an upstream fork tags a release; the CI driver runs the
stages (rebase, overlay build, static smoke, publish to a pypiserver on 127.0.0.1,
the bot branch and the pull request body); a second run changes nothing; a
conflicting release produces the conflict summary and publishes nothing."""

from __future__ import annotations

import json

import pytest

from support.git import git
from support.servers import index_files, open_pypiserver
from support.track import SECRET, make_setup, result, run_ci, tag_release

pytestmark = pytest.mark.slow

STEPS = ("track", "build", "smoke", "publish", "open-change")


def _outputs(setup) -> dict[str, bytes]:
    work = setup.out / "v1.3.0"
    out = {}
    for p in sorted(work.rglob("*")):
        if p.is_file() and ".forkpatch" not in p.parts:
            out[str(p.relative_to(work))] = p.read_bytes()
    return out


def test_new_release_is_rebased_built_smoked_published_and_proposed(tmp_path):
    with open_pypiserver(tmp_path / "index") as url:
        setup = make_setup(
            tmp_path,
            tag_v130=False,
            sections={"publish": {"to": url, "required-tiers": ["static"]}},
        )

        # Before the release: up to date, and the forecast already sees main.
        first = run_ci("track", setup)
        assert first.rc == 0, first.stderr
        assert json.loads((setup.out / "track.json").read_text())["status"] == "up-to-date"
        assert "act-idle" in (setup.out / "act.yml").read_text()  # GitLab: nothing to run

        tag_release(setup, "v1.3.0")
        tag_release(setup, "v1.4.0rc1")  # a pre-release: listed, held back
        for step in STEPS:
            r = run_ci(step, setup)
            assert r.rc == 0, f"{step}: {r.stderr}"
            assert SECRET not in r.stderr + r.stdout
        data = result(setup, "v1.3.0")
        assert data["status"] == "published"
        assert [t["tag"] for t in data["newer"]] == ["v1.3.0", "v1.4.0rc1"]
        assert data["newer"][1]["held_back"].startswith("pre-release")
        st = data["stages"]
        assert st["rebase"]["patches"] == {
            "capability-floor": "clean",
            "odd-width-padding": "merged",
            "eager-block-cast": "clean",
            "cli-version": "upstreamed",
            "vllm-dist-info": "clean",
        }
        assert st["build"]["mode"] == "overlay"
        (wheel,) = st["build"]["wheels"]
        assert wheel.startswith("1cat_vllm-1.3.0+fp.")
        assert st["smoke"]["tiers"]["static"] == "passed"
        assert st["publish"]["actions"] == {wheel: "uploaded"}
        assert index_files(url) == [wheel]

        # The bot branch: the rebased series on the project's HEAD, nothing else.
        branch = "forkpatch/rebase-v1.3.0"
        change = json.loads((setup.out / "change.json").read_text())
        assert change["kind"] == "pull" and change["branch"] == branch
        assert git(setup.project, "rev-parse", branch) == change["commit"]
        assert git(setup.project, "rev-parse", f"{branch}^") == git(
            setup.project, "rev-parse", "HEAD"
        )
        changed = git(setup.project, "diff", "--name-status", "HEAD", branch).splitlines()
        assert sorted(changed) == [
            "D\tpatches/cli-version.patch",
            "M\tpatches/odd-width-padding.patch",
            "M\tseries.yaml",
        ]
        assert "tag: v1.3.0" in git(setup.project, "show", f"{branch}:series.yaml")
        assert git(setup.project, "status", "--porcelain") == ""  # work tree untouched
        body = (setup.out / "v1.3.0" / "change-body.md").read_text()
        for needle in (
            "v1.2.1 → v1.3.0 (published)",
            "odd-width-padding",
            "merged",
            "upstreamed",
            wheel,
            st["build"]["wheels"][wheel],
            "`static.provenance` | passed",
            f"to {url}",
        ):
            assert needle in body, needle
        assert "would run: git push --force origin" in run_ci("open-change", setup).stderr

        # A second run of every step: nothing new.
        before = _outputs(setup)
        assert not any(SECRET.encode() in v for v in before.values())
        commit = change["commit"]
        for step in STEPS:
            r = run_ci(step, setup)
            assert r.rc == 0, f"{step}: {r.stderr}"
            if step in ("track", "build", "smoke", "publish"):
                assert "already done" in r.stderr, f"{step}: {r.stderr}"
        assert _outputs(setup) == before
        assert git(setup.project, "rev-parse", branch) == commit
        again = json.loads((setup.out / "change.json").read_text())
        assert again["updated"] is False and again["commit"] == commit
        assert index_files(url) == [wheel]


def test_conflicting_release_reports_the_patch_and_publishes_nothing(tmp_path):
    from forkpatch.example import ONLINE

    index = tmp_path / "published"
    setup = make_setup(
        tmp_path,
        tag_v130=False,
        sections={"publish": {"to": str(index), "required-tiers": ["static"]}},
    )
    base_py = setup.fork / ONLINE / "base.py"
    git(setup.fork, "checkout", "-q", "main")
    base_py.write_text(
        base_py.read_text().replace(
            "        # Online FP8 needs hardware FP8 or Marlin: Turing and newer.\n"
            "        return 75\n",
            "        # Online FP8 needs hardware FP8 (Ada) or Marlin (Turing and newer).\n"
            "        return 75 if marlin_available() else 89\n",
        )
    )
    git(setup.fork, "commit", "-q", "-am", "Raise the online FP8 floor without Marlin")
    tag_release(setup, "v1.3.1")

    r = run_ci("all", setup)
    assert r.rc == 0, r.stderr
    data = result(setup, "v1.3.1")
    assert data["status"] == "conflict"
    conflict = data["stages"]["rebase"]["conflict"]
    assert conflict["patch"] == "capability-floor"
    assert conflict["conflicts"][0]["path"] == f"{ONLINE}/base.py"
    assert conflict["conflicts"][0]["hunks"] == [1]
    assert {data["stages"][s]["status"] for s in ("build", "smoke", "publish")} == {"skipped"}
    assert not index.exists()
    summary = (setup.out / "v1.3.1" / "summary.md").read_text()
    for needle in (
        "does not rebase cleanly onto `v1.3.1`",
        "`capability-floor` conflicts",
        f"`{ONLINE}/base.py`",
        "forkpatch rebase --onto v1.3.1",
        "forkpatch rebase --continue",
        "After it (forecast as if it were skipped",
    ):
        assert needle in summary, needle

    change = run_ci("open-change", setup)
    assert change.rc == 0, change.stderr
    info = json.loads((setup.out / "change.json").read_text())
    assert info["kind"] == "issue" and info["branch"] is None
    assert info["title"] == "forkpatch: patch 'capability-floor' conflicts with v1.3.1"
    assert "dry run: would open or update the issue" in change.stderr
    assert git(setup.project, "branch", "--list", "forkpatch/*") == ""

    # Again: the same summary, still nothing published, same exit.
    before = (setup.out / "v1.3.1" / "summary.md").read_bytes()
    assert run_ci("all", setup).rc == 0
    assert (setup.out / "v1.3.1" / "summary.md").read_bytes() == before
    assert not index.exists()


def test_cli_exit_codes_and_conflict_exit_3(tmp_path, capsys):
    """`forkpatch track` says 10 for a new release; `--run` says 3 on a conflict."""
    from forkpatch.cli import main

    setup = make_setup(tmp_path, tag_v130=True)
    assert main(["-C", str(setup.project), "track", "--no-forecast"]) == 10
    git(setup.fork, "tag", "-d", "v1.3.0")
    assert main(["-C", str(setup.project), "track", "--no-forecast"]) == 0
    capsys.readouterr()
    from forkpatch.example import ONLINE

    base_py = setup.fork / ONLINE / "base.py"
    base_py.write_text(base_py.read_text().replace("return 75\n", "return 80\n"))
    git(setup.fork, "commit", "-q", "-am", "floor 80")
    git(setup.fork, "tag", "-a", "v1.3.1", "-m", "v1.3.1")
    code = main(["-C", str(setup.project), "track", "--run", "--json", "--out", str(setup.out)])
    out, err = capsys.readouterr()
    assert code == 3, err
    assert json.loads(out)["status"] == "conflict"
    assert "capability-floor" in err
