"""Helpers for the rebase tests: a scratch fork with a series of patches on a tag."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from fptest import Runner, ScratchRepo

LINES = "".join(f"line {i}\n" for i in range(1, 41))


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
        incoming = tmp_path / "incoming"
        fork.git(
            "format-patch",
            "-q",
            "--zero-commit",
            "--no-signature",
            "-o",
            str(incoming),
            "v1..series",
        )
        fork.git("checkout", "-q", "main")
        if upstream is not None:
            upstream(fork)
        project = tmp_path / "project"
        project.mkdir()
        run = Runner(project, capsys)
        run("init", "--fork-url", str(fork.path), "--base", "v1")
        if patches:
            run("import", *sorted(str(p) for p in incoming.glob("*.patch")))
        return Scenario(fork, project, run)

    return make
