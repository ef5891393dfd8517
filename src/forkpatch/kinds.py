"""The closed sets of words forkpatch's options, files and results use, each written once
(and the JSON value type the typed results are written as).

Each set is a ``Literal`` type (for annotations and mypy); the tuple of its words
(``typing.get_args``) is what the command line offers as choices and what the loaders
accept, so that a word added here is added everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, TypeAlias, get_args

JsonValue: TypeAlias = (
    "str | int | float | bool | Sequence[JsonValue] | Mapping[str, JsonValue] | None"
)
"""What JSON holds: the type of facts a report records as they were given (a smoke
run's environment and device, a wheel's provenance in a stage result)."""
JsonObject: TypeAlias = "Mapping[str, JsonValue]"

HardwareTier = Literal["static", "gpu", "sm70"]
"""The smoke tiers a machine has or lacks, cumulative: sm70 runs gpu and static too."""

Tier = Literal[HardwareTier, "gpu-jit"]
"""Every smoke tier: gpu-jit runs the fork's SM70 kernels as PTX on any GPU of capability
7.0 or newer (static, gpu and gpu-jit), and never counts as sm70."""

BuildMode = Literal["auto", "overlay", "container"]
"""How a wheel is built: overlay patches the released wheel, container builds from
source in the builder image, auto picks one from what the series changes."""

Toolchain = Literal["apt", "wheels", "none"]
"""How the container builder's image gets its Python packages."""

SmokeDeps = Literal["system", "index", "none"]
"""Where a smoke environment's dependencies come from."""

CheckOutcome = Literal["passed", "failed", "error", "not-run"]
"""How one smoke check went: it passed, its assertion failed, it raised, or it could not
run (its hardware or a module is absent; the reason is recorded)."""

TierStatus = Literal["passed", "failed", "incomplete", "not-run"]
"""A smoke tier's status, derived from its checks: every check passed, one failed or
errored, some could not run, or none ran (absent hardware, not requested)."""

BisectStatus = Literal["found", "nothing-to-bisect", "fails-without-patches", "not-reproduced"]
"""What ``smoke --bisect`` found: the first bad patch(es), no failing check, checks that
fail without any patch, or failures the series built again does not reproduce."""

PatchCheckStatus = Literal["no-checks", "declared-check-failed", "passed", "partial", "not-run"]
"""How the checks a patch declares (``smoke:``) went in a smoke report: it declares none,
one of them failed (whichever patch broke it), all passed, some passed, none ran."""

CacheKind = Literal["ccache", "sccache", "none"]
"""The container build's compiler cache: a local volume, a shared bucket, or none."""

HunkStatus = Literal["clean", "offset", "fuzz"]
"""How a hunk applied: where its context said, at other line numbers, or with context
lines ignored."""

PatchStatus = Literal[HunkStatus, "merged", "upstreamed", "conflict", "blocked"]
"""How a patch applied to a tree (the engine's result), from the best to the worst."""

AppliedStatus = Literal["clean", "offset", "fuzz", "merged", "resolved"]
"""A rebase's outcomes after which a patch keeps a commit on the new base."""

DroppedStatus = Literal["upstreamed", "skipped"]
"""A rebase's outcomes that take a patch out of the series."""

OutcomeStatus = Literal[AppliedStatus, DroppedStatus, "conflict"]
"""Every outcome a patch can have in a rebase."""

RebasePhase = Literal["conflict", "writing"]
"""Where a rebase in progress stands: stopped at a conflict, or writing its result."""

Relation = Literal["same", "forward", "backwards", "diverged"]
"""Where a rebase's target lies from the series' base: the same commit, a descendant, an
ancestor, or on another line of history."""

SettingKind = Literal["duration", "size", "boolean", "count", "url", "path", "text"]
"""How a FORKPATCH_* environment setting is written (forkpatch.settings reads each)."""

ChangeKind = Literal[
    "modified", "deleted", "misnamed", "added", "renamed", "removed", "moved", "edited"
]
"""How a patch file or series.yaml entry differs from what forkpatch last wrote or read
for the stack's work tree (forkpatch.stack.sync.OutsideChange); added, removed and moved
are changes of series.yaml's list, the others of one patch."""

ChangeSide = Literal["file", "worktree", "both"]
"""Which side of an outside change changed: patches/ or series.yaml only, only the work
tree (edits not written to patches/ yet), or both."""

HARDWARE_TIERS: tuple[HardwareTier, ...] = get_args(HardwareTier)
TIERS: tuple[Tier, ...] = get_args(Tier)
BUILD_MODES: tuple[BuildMode, ...] = get_args(BuildMode)
TOOLCHAINS: tuple[Toolchain, ...] = get_args(Toolchain)
SMOKE_DEPS: tuple[SmokeDeps, ...] = get_args(SmokeDeps)
CHECK_OUTCOMES: tuple[CheckOutcome, ...] = get_args(CheckOutcome)
TIER_STATUSES: tuple[TierStatus, ...] = get_args(TierStatus)
BISECT_STATUSES: tuple[BisectStatus, ...] = get_args(BisectStatus)
PATCH_CHECK_STATUSES: tuple[PatchCheckStatus, ...] = get_args(PatchCheckStatus)
CACHE_KINDS: tuple[CacheKind, ...] = get_args(CacheKind)
HUNK_STATUSES: tuple[HunkStatus, ...] = get_args(HunkStatus)
PATCH_STATUSES: tuple[PatchStatus, ...] = get_args(PatchStatus)
APPLIED_STATUSES: tuple[AppliedStatus, ...] = get_args(AppliedStatus)
DROPPED_STATUSES: tuple[DroppedStatus, ...] = get_args(DroppedStatus)
OUTCOME_STATUSES: tuple[OutcomeStatus, ...] = get_args(OutcomeStatus)
REBASE_PHASES: tuple[RebasePhase, ...] = get_args(RebasePhase)
RELATIONS: tuple[Relation, ...] = get_args(Relation)
SETTING_KINDS: tuple[SettingKind, ...] = get_args(SettingKind)
CHANGE_KINDS: tuple[ChangeKind, ...] = get_args(ChangeKind)
CHANGE_SIDES: tuple[ChangeSide, ...] = get_args(ChangeSide)
