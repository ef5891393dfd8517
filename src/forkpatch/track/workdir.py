"""A run's work directory, ``<out>/<tag>/``: ``run.json``, one file per stage under
``stages/``, and the views derived from them (``result.json``, ``summary.md``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from forkpatch import log
from forkpatch.errors import UsageError
from forkpatch.fsutil import atomic_write, name_part, read_regular
from forkpatch.project import Project
from forkpatch.track.stages import (
    STEPS,
    RunInfo,
    RunState,
    StageResult,
    Stages,
    stage_from_json,
    stage_to_json,
)
from forkpatch.track.summary import summary_markdown

DEFAULT_OUT = "track"  # under the project's .forkpatch/
RESULT_FILE = "result.json"
SUMMARY_FILE = "summary.md"
LATEST_FILE = "latest"
RUN_FILE = "run.json"
STAGES_DIR = "stages"


class WorkDir:
    """``<out>/<tag>/``: one file per stage, plus the derived result.json / summary.md."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def stage_file(self, stage: str) -> Path:
        return self.path / STAGES_DIR / f"{stage}.json"

    def load_info(self) -> RunInfo | None:
        return RunInfo.from_json(_load_json(self.path / RUN_FILE))

    def load_stages(self) -> Stages:
        stages = Stages()
        for stage in STEPS:
            raw = _load_json(self.stage_file(stage))
            if raw is None:
                continue
            result = stage_from_json(stage, raw)
            if result is None:
                log.warn(f"{self.stage_file(stage)} is not a {stage} result; ignored")
                continue
            stages = stages.with_result(stage, result)
        return stages

    def save_info(self, info: RunInfo) -> None:
        atomic_write(self.path / RUN_FILE, _dump(info.to_json()))

    def save_stage(self, stage: str, result: StageResult) -> None:
        atomic_write(self.stage_file(stage), _dump(stage_to_json(result)))

    def save_views(self, state: RunState) -> None:
        atomic_write(self.path / RESULT_FILE, _dump(state.to_json()))
        atomic_write(self.path / SUMMARY_FILE, summary_markdown(state, self.path).encode())


def out_root(project: Project, out_dir: Path | None) -> Path:
    return (out_dir or project.state_dir / DEFAULT_OUT).resolve()


def _load_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(read_regular(path, follow=False).decode("utf-8"))
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _dump(data: Any) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


def load_run(project: Project, out_dir: Path | None, tag: str | None) -> tuple[Path, RunState]:
    """The work directory and the state of the last run (or of ``tag``'s)."""
    root = out_root(project, out_dir)
    if tag is None:
        try:
            name = (root / LATEST_FILE).read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            raise UsageError(
                f"no `forkpatch track --run` output in {root}",
                tip="run `forkpatch track --run` first, or pass --out",
            ) from None
    else:
        name = name_part(tag)
    work = WorkDir(root / name)
    info = work.load_info()
    if info is None:
        raise UsageError(
            f"no result for {tag or name} in {work.path}",
            tip="run `forkpatch track --run` first, or pass --out / --tag",
        )
    state = RunState(info=info, stages=work.load_stages())
    work.save_views(state)
    return work.path, state
