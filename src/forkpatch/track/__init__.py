"""Tracking fork releases: which tags are newer than the base, which to act on, and acting.

The package, by job:

* :mod:`~forkpatch.track.releases`: listing (:func:`list_releases`): the fork's
  release tags newer than the base (series.yaml ``track.pattern``,
  ``track.prereleases``, ``track.min-age-days``) and the one to act on.
* :mod:`~forkpatch.track.forecast`: :func:`forecast`: the series checked in memory
  against the head of the fork's default branch (``track.branch`` to pick another).
* :mod:`~forkpatch.track.stages`: the typed stage results and their JSON.
* :mod:`~forkpatch.track.workdir`: a run's work directory and its files.
* :mod:`~forkpatch.track.pipeline`: each stage's work, on a copy of the project.
* :mod:`~forkpatch.track.act`: :func:`run`, the stages one after the other.
* :mod:`~forkpatch.track.summary`: the pull/merge request body.
* :mod:`~forkpatch.track.bot`: :func:`prepare_change`, the bot branch.

Acting (:func:`run`): for the chosen tag, in a work directory of its own
(``<out>/<tag>/``, never the project itself): check, rebase, build, smoke and
publish, each a *stage* whose typed result (:class:`RebaseDone`,
:class:`BuildDone`, ...) is written to a file of its own,
``<out>/<tag>/stages/<stage>.json``, next to the files that stage made
(``rebase/`` + ``project/``, ``dist/``, ``smoke/``). Each stage writes only its
own files and reads only those of the stages it needs, so a pipeline can run
the stages on different machines and pass the directories along in any order.
``result.json`` and ``summary.md`` (a pull/merge request body) are views of
those files. A stage already done for the same inputs (:class:`RunKey`: the
target tag's commit and the bytes of series.yaml + patches/) is not done
again; the summary carries the key and the outcome in a ``forkpatch-state``
comment, so a later run that is handed the open change's body (``proposed``)
does nothing at all when that change already says everything there is to say.

:func:`prepare_change` turns a finished run into a commit on a bot branch of the
project's own repository (deterministic: same inputs, same commit id), plus
the title and body of the pull request, or of the issue when the rebase
conflicts. Talking to GitHub/GitLab is left to ``ci/forkpatch-ci.sh``.
"""

from __future__ import annotations

from forkpatch.results import FileConflict
from forkpatch.track.act import RunResult, run
from forkpatch.track.bot import MAX_BODY, Change, prepare_change
from forkpatch.track.forecast import (
    BranchForecast,
    ConflictEntry,
    forecast,
    forecast_or_warn,
    fork_branch_head,
)
from forkpatch.track.pipeline import RunOptions
from forkpatch.track.releases import (
    DEFAULT_PATTERN,
    TagInfo,
    TrackReport,
    bot_branch,
    list_releases,
    parse_tag,
    pick_tag,
)
from forkpatch.track.stages import (
    STEPS,
    BuildDone,
    Failed,
    PublishDone,
    RebaseConflict,
    RebaseDone,
    RunInfo,
    RunKey,
    RunState,
    Skipped,
    SmokeRun,
    Stages,
    is_final,
    overall_status,
    parse_state_marker,
    stage_from_json,
    stage_to_json,
)
from forkpatch.track.summary import summary_markdown
from forkpatch.track.workdir import SUMMARY_FILE

__all__ = [
    "DEFAULT_PATTERN",
    "MAX_BODY",
    "STEPS",
    "SUMMARY_FILE",
    "BranchForecast",
    "BuildDone",
    "Change",
    "ConflictEntry",
    "Failed",
    "FileConflict",
    "PublishDone",
    "RebaseConflict",
    "RebaseDone",
    "RunInfo",
    "RunKey",
    "RunOptions",
    "RunResult",
    "RunState",
    "Skipped",
    "SmokeRun",
    "Stages",
    "TagInfo",
    "TrackReport",
    "bot_branch",
    "forecast",
    "forecast_or_warn",
    "fork_branch_head",
    "is_final",
    "list_releases",
    "overall_status",
    "parse_state_marker",
    "parse_tag",
    "pick_tag",
    "prepare_change",
    "run",
    "stage_from_json",
    "stage_to_json",
    "summary_markdown",
]
