"""``forkpatch check --onto TAG`` and ``forkpatch rebase --onto TAG`` (``--continue`` /
``--skip`` / ``--abort``): the series moved onto a new fork release.

The package, in the order a rebase uses it:

* :mod:`~forkpatch.rebase.plan`: the data: one :class:`Outcome` per patch in a frozen
  :class:`Plan`, the :class:`RebaseOptions`, the classifier's memo.
* :mod:`~forkpatch.rebase.classifier`: the classification in memory (:func:`classify`,
  :func:`check`), forecasting past conflicts; no writes.
* :mod:`~forkpatch.rebase.upstream`: evidence that a patch is already upstream
  (patch-id, the upstream commit the patch names).
* :mod:`~forkpatch.rebase.state`: the frozen :class:`RebaseState` and its journal in
  ``.forkpatch/rebase/`` (versioned, checksummed, validated on load).
* :mod:`~forkpatch.rebase.conflict`: the conflict work tree, written without ever
  following a symbolic link.
* :mod:`~forkpatch.rebase.run`: rebase / continue / skip / abort / finish as one
  transaction over the state.
* :mod:`~forkpatch.rebase.report`: the typed :class:`RebaseReport` (its JSON and
  Markdown) with range-diffs.
"""

from __future__ import annotations

from forkpatch.rebase.classifier import check, classify
from forkpatch.rebase.plan import (
    Forecast,
    Outcome,
    Plan,
    RebaseOptions,
    Target,
)
from forkpatch.rebase.report import RebaseReport
from forkpatch.rebase.run import (
    RebaseResult,
    RebaseStopped,
    abort,
    continue_,
    pending_hint,
    rebase,
    skip,
    stopped_json,
)
from forkpatch.rebase.upstream import replacement

__all__ = [
    "Forecast",
    "Outcome",
    "Plan",
    "RebaseOptions",
    "RebaseReport",
    "RebaseResult",
    "RebaseStopped",
    "Target",
    "abort",
    "check",
    "classify",
    "continue_",
    "pending_hint",
    "rebase",
    "replacement",
    "skip",
    "stopped_json",
]
