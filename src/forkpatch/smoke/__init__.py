"""Smoke suite: install a built wheel in a fresh environment and prove it works.

Public API: :func:`run_smoke` with :class:`SmokeOptions`; the check registry in
:mod:`forkpatch.smoke.checks`; reports in :mod:`forkpatch.smoke.report`. The
checks themselves (:mod:`forkpatch.smoke.incheck`) run inside the environment.
"""

from __future__ import annotations

from forkpatch.smoke.runner import SmokeOptions, SmokeOutcome, run_smoke

__all__ = ["SmokeOptions", "SmokeOutcome", "run_smoke"]
