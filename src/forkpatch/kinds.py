"""The closed sets of words forkpatch's options, files and results use, each written once.

Each set is a ``Literal`` type (for annotations and mypy); the tuple of its words
(``typing.get_args``) is what the command line offers as choices and what the loaders
accept, so that a word added here is added everywhere.
"""

from __future__ import annotations

from typing import Literal, get_args

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
