"""The closed sets of words forkpatch's options, files and results use, each written once
(and the JSON value type the typed results are written as).

Each set is a ``Literal`` type (for annotations and mypy); the tuple of its words
(``typing.get_args``) is what the command line offers as choices and what the loaders
accept, so that a word added here is added everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, TypeAlias, TypeVar, get_args

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

BuilderMode = Literal["overlay", "container"]
"""The two builders of a wheel: overlay patches the released wheel, container builds
from source in the builder image."""

BuildMode = Literal["auto", BuilderMode]
"""How a wheel is to be built: by one builder, or auto (one picked from what the series
changes and whether a base wheel is configured)."""

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

HunkLineKind = Literal[" ", "-", "+"]
"""A line of a hunk's body: context, removed or added."""

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
BUILDER_MODES: tuple[BuilderMode, ...] = get_args(BuilderMode)
BUILD_MODES: tuple[BuildMode, ...] = get_args(BuildMode)
TOOLCHAINS: tuple[Toolchain, ...] = get_args(Toolchain)
SMOKE_DEPS: tuple[SmokeDeps, ...] = get_args(SmokeDeps)
CHECK_OUTCOMES: tuple[CheckOutcome, ...] = get_args(CheckOutcome)
TIER_STATUSES: tuple[TierStatus, ...] = get_args(TierStatus)
BISECT_STATUSES: tuple[BisectStatus, ...] = get_args(BisectStatus)
PATCH_CHECK_STATUSES: tuple[PatchCheckStatus, ...] = get_args(PatchCheckStatus)
CACHE_KINDS: tuple[CacheKind, ...] = get_args(CacheKind)
HUNK_STATUSES: tuple[HunkStatus, ...] = get_args(HunkStatus)
HUNK_LINE_KINDS: tuple[HunkLineKind, ...] = get_args(HunkLineKind)
PATCH_STATUSES: tuple[PatchStatus, ...] = get_args(PatchStatus)
APPLIED_STATUSES: tuple[AppliedStatus, ...] = get_args(AppliedStatus)
DROPPED_STATUSES: tuple[DroppedStatus, ...] = get_args(DroppedStatus)
OUTCOME_STATUSES: tuple[OutcomeStatus, ...] = get_args(OutcomeStatus)
REBASE_PHASES: tuple[RebasePhase, ...] = get_args(RebasePhase)
RELATIONS: tuple[Relation, ...] = get_args(Relation)
SETTING_KINDS: tuple[SettingKind, ...] = get_args(SettingKind)
CHANGE_KINDS: tuple[ChangeKind, ...] = get_args(ChangeKind)
CHANGE_SIDES: tuple[ChangeSide, ...] = get_args(ChangeSide)

TeamCheckSource = Literal["project", "fork"]
"""Where a team's pytest check lives (smoke.checks' ``in``): the project, or the fork's
tree at the series' base."""

CheckFailure = Literal["failed", "error"]
"""The outcomes of a smoke check that count against it: its assertion failed, or it
raised (the others: passed, not-run)."""

# The words of the results of the later stages (droppable, publish, track) and of the
# upstream questions, each a Literal with its tuple beside it.

Verdict = Literal["droppable", "needed", "not-evaluated"]
"""`forkpatch droppable`'s answer for one patch: it can go, it must stay, or it could
not be judged (what was missing is named)."""

PublishAction = Literal["uploaded", "already-published"]
"""What `forkpatch publish` did with a wheel: put it there, or found the same bytes."""

StageStatus = Literal["done", "conflict", "failed", "skipped", "not-run"]
"""How one stage of a `forkpatch track` run ended (not-run: a smoke whose tiers asked
for did not all run)."""

RunStatus = Literal["conflict", "failed", "published", "smoked", "built", "rebased", "pending"]
"""A `forkpatch track` run as a whole: the furthest stage done, or why it stopped."""

TrackStatus = Literal[RunStatus, "up-to-date", "unchanged"]
"""What `forkpatch track` reports: a run's status, or that there was nothing to run (no
newer release; the open change reports these inputs already)."""

ReleaseStatus = Literal["new-release", "up-to-date"]
"""Where a series stands against the fork's releases (`forkpatch track --list`)."""

TrackChangeKind = Literal["pull", "issue", "none"]
"""What `forkpatch track`'s bot opens for a run: a pull request with the rebased
series, an issue (a conflict or a failure), or nothing."""

ReferenceKind = Literal["github-pr", "gitlab-mr", "commit"]
"""What a patch's ``upstream:`` names that forkpatch can ask about."""

UpstreamState = Literal["open", "draft", "merged", "closed", "unknown"]
"""Where a patch's upstream request stands, as ``status --upstream`` says."""

CHECK_FAILURES: tuple[CheckFailure, ...] = get_args(CheckFailure)
TEAM_CHECK_SOURCES: tuple[TeamCheckSource, ...] = get_args(TeamCheckSource)
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)
PUBLISH_ACTIONS: tuple[PublishAction, ...] = get_args(PublishAction)
STAGE_STATUSES: tuple[StageStatus, ...] = get_args(StageStatus)
RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
TRACK_STATUSES: tuple[TrackStatus, ...] = get_args(TrackStatus)
RELEASE_STATUSES: tuple[ReleaseStatus, ...] = get_args(ReleaseStatus)
TRACK_CHANGE_KINDS: tuple[TrackChangeKind, ...] = get_args(TrackChangeKind)
REFERENCE_KINDS: tuple[ReferenceKind, ...] = get_args(ReferenceKind)
UPSTREAM_STATES: tuple[UpstreamState, ...] = get_args(UpstreamState)


_Word = TypeVar("_Word", bound=str)


def word_of(value: object, words: tuple[_Word, ...]) -> _Word | None:
    """``value`` typed as the word of the closed set ``words`` it is (None when it is
    none of them): how a plain string read from outside becomes one of these types."""
    for word in words:
        if value == word:
            return word
    return None
