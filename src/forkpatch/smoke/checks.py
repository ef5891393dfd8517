"""The registry of smoke checks, as forkpatch sees it: ids, tiers, needs, summaries.

The checks themselves live in :mod:`forkpatch.smoke.incheck` (they run inside
the smoke environment); this module reads that file's registry so there is one
list, and validates the check ids a series names under ``smoke:``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from forkpatch.checkids import GPU_JIT_TWINS
from forkpatch.errors import SeriesError, SmokeError
from forkpatch.kinds import TIERS as TIER_WORDS
from forkpatch.kinds import Tier, word_of
from forkpatch.sections import TeamCheck
from forkpatch.series import SERIES_FILE, PatchEntry, Series
from forkpatch.smoke import incheck
from forkpatch.smoke.kernels import HOST_CHECKS

TIERS: tuple[str, ...] = incheck.TIERS


@dataclass(frozen=True)
class CheckSpec:
    """One check: ``id`` is ``<tier>.<name>``; ``baseline`` checks run for every wheel."""

    id: str
    tier: Tier
    needs: tuple[str, ...]
    baseline: bool
    summary: str


def tier_of(word: str, check_id: str) -> Tier:
    """The tier ``word`` names (the in-venv registry spells tiers as plain strings)."""
    tier = word_of(word, TIER_WORDS)
    if tier is not None:
        return tier
    raise SmokeError(
        f"check {check_id}: unknown tier {word!r}", tip=f"tiers: {', '.join(TIER_WORDS)}"
    )


def registry(series: Series | None = None) -> dict[str, CheckSpec]:
    """Every known check, by id, in registration order (those run on the host last,
    then the team's own checks that ``series`` declares under ``smoke.checks``)."""
    out = {
        d.id: CheckSpec(d.id, tier_of(d.tier, d.id), d.needs, d.baseline, d.summary)
        for d in incheck.REGISTRY.values()
    }
    for h in HOST_CHECKS.values():
        out[h.id] = CheckSpec(h.id, h.tier, (), h.baseline, h.summary)
    if series is not None:
        for cid, tc in series.smoke.team_checks().items():
            tier = tier_of(cid.partition(".")[0], cid)
            out.setdefault(cid, CheckSpec(cid, tier, (), False, team_summary(tc)))
    return out


def team_summary(tc: TeamCheck) -> str:
    what = (
        f"pytest {tc.pytest} (in the {tc.source or 'project'})"
        if tc.pytest
        else ("command " + " ".join(tc.command or ()))
    )
    return f"the team's check: {tc.summary + '; ' if tc.summary else ''}{what}"


def tiers_up_to(tier: str) -> tuple[str, ...]:
    """Tiers are cumulative: ``gpu`` runs static and gpu; ``sm70`` static, gpu and sm70;
    ``gpu-jit`` (its own tier, never a stand-in for sm70) static, gpu and gpu-jit."""
    if tier not in TIERS:
        raise SmokeError(
            f"unknown tier {tier!r}{_suggest(tier, TIERS)}", tip=f"tiers: {', '.join(TIERS)}"
        )
    return incheck.TIER_RUNS[tier]


def _suggest(word: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def get(check_id: str, series: Series | None = None) -> CheckSpec:
    reg = registry(series)
    if check_id not in reg:
        raise SmokeError(
            f"unknown smoke check '{check_id}'{_suggest(check_id, reg)}",
            tip="`forkpatch smoke --list-checks` lists them",
        )
    return reg[check_id]


def validate_series(series: Series, *, path: str = SERIES_FILE) -> None:
    """Every ``smoke:`` id in the series must be a known check, and the team's own
    checks must not take a built-in check's id (SeriesError otherwise)."""
    builtin = registry()
    reg = registry(series)
    problems = [
        f"{path}: smoke.checks declares '{cid}', which is a built-in check's id"
        for cid in series.smoke.team_checks()
        if cid in builtin
    ]
    for entry in series.patches:
        for cid in entry.smoke:
            if cid not in reg:
                problems.append(
                    f"{path}:{entry.line}: patch '{entry.name}' names unknown smoke "
                    f"check '{cid}'{_suggest(cid, reg)}"
                )
        for cid in entry.drop_when_passes_without:
            if cid not in reg:
                problems.append(
                    f"{path}:{entry.line}: patch '{entry.name}': drop-when.passes-without "
                    f"names unknown smoke check '{cid}'{_suggest(cid, reg)}"
                )
    if problems:
        raise SeriesError(
            "\n".join(problems), tip="`forkpatch smoke --list-checks` lists the known checks"
        )


def baseline(tiers: Sequence[str]) -> list[str]:
    return [c.id for c in registry().values() if c.baseline and c.tier in tiers]


def plan(patches: Sequence[PatchEntry], series: Series | None = None) -> dict[str, list[str]]:
    """check id -> the patches that asked for it ([] for baseline checks), in run order.

    Every check of every tier appears (so the report can say "not run" for
    tiers not selected); baseline first, then the patches' checks in series
    order. A patch's sm70 check (or static CPU twin) brings its gpu-jit twins
    (:func:`twins`), asked for by the same patch: the gpu-jit tier runs what the
    patches call for without series.yaml naming its checks.
    """
    reg = registry(series)
    out: dict[str, list[str]] = {}
    for cid in baseline(TIERS):
        out[cid] = []
    for entry in patches:
        for cid in entry.smoke:
            if cid not in reg:
                raise SmokeError(
                    f"patch '{entry.name}' names unknown smoke check '{cid}'{_suggest(cid, reg)}",
                    tip="fix series.yaml; `forkpatch smoke --list-checks` lists them",
                )
            for asked in (cid, *twins(cid)):
                out.setdefault(asked, [])
                if entry.name not in out[asked]:
                    out[asked].append(entry.name)
    order = {t: i for i, t in enumerate(TIERS)}
    return dict(sorted(out.items(), key=lambda kv: order[reg[kv[0]].tier]))


def twins(check_id: str) -> tuple[str, ...]:
    """The gpu-jit checks that run ``check_id``'s check through the fork's kernels as
    PTX (checkids.GPU_JIT_TWINS; none for a check with no gpu-jit form)."""
    return GPU_JIT_TWINS.get(check_id, ())
