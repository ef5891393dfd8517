"""``forkpatch droppable``: which patches the series no longer needs, on evidence.

For each patch the command evaluates its ``drop-when`` conditions at a target (the
series' base, or ``--onto REF`` after an in-memory rebase there):

- ``upstreamed: true`` holds when the rebase classifier finds the patch already in
  the target (its ``upstreamed`` status, with the classifier's evidence);
- ``passes-without: [checks]`` holds when those smoke checks pass on the series at
  the target *without* the patch: built in memory (an overlay wheel from the base
  wheel of the target, in a scratch copy of the project) and smoked in a fresh
  environment with every tier the machine has.

The patch's own ``smoke:`` checks are run on the series with and without it: one
that passes with the patch and fails without it proves the patch is needed,
whatever ``drop-when`` says. Verdicts: ``droppable`` (every declared condition
holds), ``needed`` (a condition fails: which check, how), ``not-evaluated`` (what
is missing: a tier this machine does not have, a base wheel, a condition in words
only). Never a guess: a check that could not run decides nothing.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from forkpatch import kinds, log
from forkpatch.errors import ForkpatchError, UsageError
from forkpatch.project import Project
from forkpatch.series import PatchEntry, Series

if TYPE_CHECKING:
    from forkpatch.rebase import Target
    from forkpatch.rebase.plan import Outcome

DROPPABLE: Final[kinds.Verdict] = "droppable"
NEEDED: Final[kinds.Verdict] = "needed"
NOT_EVALUATED: Final[kinds.Verdict] = "not-evaluated"


@dataclass(frozen=True)
class DroppableOptions:
    """What ``forkpatch droppable`` was asked to do."""

    names: tuple[str, ...] = ()  # empty: every patch
    onto: str | None = None  # None: the series' base
    base_wheel: Path | None = None  # the fork's wheel for the target (default: build.base-wheel)
    deps: str = "system"
    python: str | None = None  # None: series.yaml's smoke.python, else this interpreter
    index_url: str | None = None  # None: series.yaml's smoke.index-url
    timeout_s: float = 3600.0  # per smoke run


@dataclass(frozen=True)
class Verdict:
    """One patch's answer, with the facts it rests on."""

    name: str
    verdict: kinds.Verdict
    evidence: str
    condition: str = ""  # drop-when's text
    upstream_status: str | None = None  # the patch's status at the target (the rebase's)
    without: dict[str, str] = field(default_factory=dict)  # check -> outcome without the patch
    with_patch: dict[str, str] = field(default_factory=dict)  # check -> outcome with it
    missing: tuple[str, ...] = ()  # what was missing for a verdict (not-evaluated)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "verdict": self.verdict,
            "evidence": self.evidence,
        }
        if self.condition:
            out["condition"] = self.condition
        if self.upstream_status is not None:
            out["status_at_target"] = self.upstream_status
        if self.without:
            out["checks_without_patch"] = self.without
        if self.with_patch:
            out["checks_with_patch"] = self.with_patch
        if self.missing:
            out["missing"] = list(self.missing)
        return out


@dataclass(frozen=True)
class DroppableResult:
    base: str
    target: str
    target_commit: str
    patches: tuple[Verdict, ...]
    builds: int = 0
    smokes: int = 0
    seconds: float = 0.0

    @property
    def droppable(self) -> list[str]:
        return [v.name for v in self.patches if v.verdict == DROPPABLE]

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "forkpatch-droppable",
            "base": self.base,
            "target": self.target,
            "target_commit": self.target_commit,
            "patches": [v.to_json() for v in self.patches],
            "droppable": self.droppable,
            "builds": self.builds,
            "smokes": self.smokes,
            "seconds": round(self.seconds, 3),
        }


@dataclass
class _Run:
    """A smoke of one variant of the series: check id -> (outcome, detail)."""

    checks: dict[str, tuple[str, str]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # the smoke report's (how to install a missing module)
    failure: str | None = None  # why the variant could not be built or smoked
    #: a patch above the dropped one that needs its lines (only the patches below ran)
    blocked_by: str | None = None

    @property
    def without_words(self) -> str:
        if self.blocked_by is None:
            return "without it"
        return f"on the patches below it (without it: '{self.blocked_by}' builds on its lines)"

    def outcomes(self, ids: Sequence[str]) -> dict[str, str]:
        return {c: self.checks[c][0] for c in ids if c in self.checks}

    def why_not_run(self, cid: str) -> str:
        """Why ``cid`` did not run: the check's own reason (a tier this machine lacks, a
        module the smoke environment lacks, with the line that installs it)."""
        from forkpatch.smoke.incheck.registry import missing_modules

        outcome, detail = self.checks.get(cid, ("absent", ""))
        if outcome == "absent":
            return "not in the smoke report"
        why = _gist(detail)
        for module in missing_modules(detail):
            for note in self.notes:
                if f"the module '{module}'" in note:
                    why += f" ({note.split(': ', 1)[-1]})"
                    break
        return why

    def missing(self, cid: str) -> str:
        """What a check that did not run lacked, in a word: ``module torch``, ``tier sm70``."""
        from forkpatch.smoke.incheck.registry import missing_modules

        modules = missing_modules(self.checks.get(cid, ("", ""))[1])
        if modules:
            return f"module {modules[0]}"
        return f"tier {cid.partition('.')[0]}"


def _gist(detail: str) -> str:
    lines = [ln.strip() for ln in detail.splitlines() if ln.strip()]
    if not lines:
        return "no detail"
    return lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"


class _Evaluator:
    def __init__(self, project: Project, opts: DroppableOptions, work: Path) -> None:
        from forkpatch.smoke.scratch import ScratchBuilds

        self.project = project
        self.opts = opts
        self.scratch = ScratchBuilds(project, work)
        self._series: Series | None = None
        self.smokes = 0
        # Each variant is built once: (the scratch project, the wheel, the patch above
        # that builds on the dropped one), or why it could not be built.
        self._built: dict[str | None, tuple[Project, Path, str | None] | str] = {}

    def target_series(self, dropped: str | None) -> tuple[Series, str | None]:
        """The series at the target (the project's on its base, else rebased in the
        copy, once), without the patch ``dropped`` when one is named; and the patch
        above it that builds on its lines, when there is one (then only the patches
        below it are kept: that patch cannot stay without it)."""
        from forkpatch.smoke.scratch import BuildsOnIt

        if self._series is None:
            onto = self.opts.onto
            self._series = self.project.series if onto is None else self.scratch.rebase(onto)
        if dropped is None:
            return self._series, None
        try:
            return self.scratch.without(self._series, dropped), None
        except BuildsOnIt as exc:
            log.warn(f"{exc}: evaluating it on the patches below it")
            return self.scratch.below(self._series, dropped), exc.patch

    def build(
        self, dropped: str | None, base_wheel: Path, label: str
    ) -> tuple[Project, Path, str | None] | str:
        """The variant without ``dropped`` (None: the whole series), built once."""
        if dropped not in self._built:
            try:
                series, blocked_by = self.target_series(dropped)
                scratch, wheel = self.scratch.build(series, base_wheel, label)
                self._built[dropped] = (scratch, wheel, blocked_by)
            except ForkpatchError as exc:
                log.warn(f"the series {label} could not be built: {exc}")
                self._built[dropped] = f"{exc}"
        return self._built[dropped]

    def smoke(
        self,
        dropped: str | None,
        base_wheel: Path,
        label: str,
        checks: Sequence[str],
        into: _Run | None = None,
    ) -> _Run:
        """Smoke ``checks`` on the variant without ``dropped`` (built once), adding to
        ``into`` (the checks it has already are not run again)."""
        from forkpatch.smoke.runner import SmokeOptions, run_smoke

        run = into or _Run()
        built = self.build(dropped, base_wheel, label)
        if isinstance(built, str):
            run.failure = built
            return run
        scratch, wheel, run.blocked_by = built
        checks = [c for c in checks if c not in run.checks]
        if not checks or run.failure is not None:
            return run
        # The command line's interpreter and index over series.yaml's, as `smoke` takes them.
        configured = self.project.series.smoke
        try:
            with log.step(f"smoke the series {label}: {', '.join(checks)}"):
                outcome = run_smoke(
                    SmokeOptions(
                        wheels=(wheel,),
                        tier="sm70",  # every tier: those this machine lacks report not-run
                        deps=self.opts.deps,
                        python=self.opts.python or configured.python,
                        index_url=self.opts.index_url or configured.index_url,
                        timeout_s=self.opts.timeout_s,
                        checks=tuple(checks),
                        checks_root=self.project.root,  # the team's checks' files
                    ),
                    scratch,
                )
            self.smokes += 1
        except ForkpatchError as exc:
            run.failure = f"{exc}"
            log.warn(f"the series {label} could not be built and smoked: {exc}")
            return run
        for c in outcome.report.checks:
            run.checks[c.id] = (c.outcome, c.detail)
        run.notes = (*run.notes, *(n for n in outcome.report.notes if n not in run.notes))
        return run


def _resolve_base_wheel(project: Project, opts: DroppableOptions, target: Target) -> Path | str:
    """The base wheel of the fork at ``target`` (the series' base, or where --onto
    moves it), or why there is none, in words that fit the case."""
    from forkpatch.baseversion import base_version
    from forkpatch.wheels.buildwheel import configured_base_wheel
    from forkpatch.wheels.overlay import fork_version_matches

    series = project.series
    base = target.base
    version = base_version(project.fork(), base, series.track.pattern).version
    where = f"{base.describe()} ({version})"
    onto = "" if opts.onto is None else f" --onto {opts.onto}"
    build_one = f"`forkpatch base-wheel{onto}` builds a Python-only one"
    template = series.build.base_wheel or ""
    if opts.base_wheel is None and opts.onto is not None and template and "{" not in template:
        # build.base-wheel names one wheel: the fork's for the series' own base.
        return (
            f"no base wheel of the fork at {where}: build.base-wheel ({template}) is the "
            f"wheel of the series' base {series.base.describe()}; pass --base-wheel with the "
            f"fork's wheel at {where} ({build_one}), or name it in build.base-wheel by "
            "{tag} or {version}"
        )
    given, source = configured_base_wheel(project, base, version, opts.base_wheel)
    if given is None:
        return f"no base wheel of the fork at {where}: pass --base-wheel ({build_one})"
    if not given.is_file() and opts.base_wheel is None:
        return f"no base wheel of the fork at {where}: {given} (from {source}) is not there"
    if not given.is_file():
        raise UsageError(
            f"base wheel {given} (from {source}) does not exist",
            tip=f"give the fork's wheel for {where}: {build_one}",
        )
    found = _wheel_version(given)
    if found is not None and not fork_version_matches(found, version):
        moved = (
            f"the series rebased onto {target.name} is on the fork's {version}"
            if opts.onto is not None
            else f"the series is based on the fork's {version} ({base.describe()})"
        )
        message = f"base wheel {given.name} (from {source}) is the fork's {found}, but {moved}"
        if opts.base_wheel is None:
            return message
        raise UsageError(
            message, tip=f"pass the fork's wheel for {where} with --base-wheel ({build_one})"
        )
    return given.resolve()


def _wheel_version(wheel: Path) -> str | None:
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        return str(parse_wheel_filename(wheel.name)[1])
    except InvalidWheelFilename:
        return None


def _pick(series: Series, names: Sequence[str]) -> list[PatchEntry]:
    if not names:
        return list(series.patches)
    return [series.get(n) for n in dict.fromkeys(names)]


def evaluate(project: Project, opts: DroppableOptions) -> DroppableResult:
    """Evaluate the patches' drop-when conditions (see the module doc)."""
    from forkpatch.rebase import Target, classify
    from forkpatch.smoke import checks as registry

    t0 = time.monotonic()
    series = project.series
    registry.validate_series(series, path=project.rel(project.series_path))
    chosen = _pick(series, opts.names)
    fork = project.fork()
    if opts.onto is None:
        target = Target(series.base.label, series.base.commit, record=series.base)
        fork.require_commit(series.base.commit, f"series.yaml's base ({series.base.describe()})")
    else:
        from forkpatch.rebase.classifier import check_target

        target = check_target(project, opts.onto).target  # a tag, a branch, a commit id
    with log.step(f"classify the series on {target.name} in memory"):
        plan = classify(project, target)
    status = {o.name: o for o in plan.outcomes}
    upstreamed = {n for n, o in status.items() if o.status == "upstreamed"}
    conflicts = [n for n, o in status.items() if o.status == "conflict"]
    base_wheel = _resolve_base_wheel(project, opts, target)

    verdicts: list[Verdict] = []
    # The checks each patch needs run on the series without it; its own checks also
    # run once on the whole series (at the target), for the comparison.
    needs_build = {
        e.name: [*dict.fromkeys([*e.drop_when_passes_without, *e.smoke])]
        for e in chosen
        if e.name not in upstreamed and (e.drop_when_passes_without or e.smoke)
    }
    # "Droppable" means the series without the patch passes every check the series
    # declares for the patches that stay, not only the patch's own: a patch above may
    # use what it adds. Those checks run without it too, and once with every patch.
    # They run only where the patch's own checks leave it droppable (or undecided):
    # a patch its own checks prove needed costs no more than that.
    declared = {e.name: e.smoke for e in series.patches if e.name not in upstreamed}
    stays = {name: _stay_checks(declared, name, needs_build[name]) for name in needs_build}
    build_block = None
    if needs_build and conflicts:
        build_block = (
            f"patch(es) {', '.join(conflicts)} conflict on {target.name}: the series "
            "cannot be built there (`forkpatch check --onto` says where)"
        )
    elif needs_build and isinstance(base_wheel, str):
        build_block = base_wheel
    with tempfile.TemporaryDirectory(prefix="forkpatch-droppable-") as tmp:
        ev = _Evaluator(project, opts, Path(tmp))
        full: _Run | None = None
        if needs_build and build_block is None:
            assert isinstance(base_wheel, Path)
            own = [*dict.fromkeys(c for e in chosen if e.name in needs_build for c in e.smoke)]
            if own:
                full = ev.smoke(None, base_wheel, "with every patch", own)
        for entry in chosen:
            st = status.get(entry.name)
            if entry.name in upstreamed or entry.name not in needs_build:
                verdicts.append(_without_build(entry, st.status if st else None, st, target.name))
                continue
            if build_block is not None:
                verdicts.append(
                    _verdict(
                        entry,
                        NOT_EVALUATED,
                        f"{target.name}: {build_block}",
                        st,
                        missing=("build",),
                    )
                )
                continue
            assert isinstance(base_wheel, Path)
            label = f"without {entry.name}"
            without = ev.smoke(entry.name, base_wheel, label, needs_build[entry.name])
            verdict = _with_checks(entry, st, target.name, full, without)
            others = stays[entry.name]
            if others and _undecided(verdict):
                full = ev.smoke(None, base_wheel, "with every patch", list(others), into=full)
                without = ev.smoke(entry.name, base_wheel, label, list(others), into=without)
                verdict = _with_checks(entry, st, target.name, full, without, others)
            verdicts.append(verdict)
        builds = ev.scratch.builds
        smokes = ev.smokes
    return DroppableResult(
        base=series.base.label,
        target=target.name,
        target_commit=target.commit,
        patches=tuple(verdicts),
        builds=builds,
        smokes=smokes,
        seconds=time.monotonic() - t0,
    )


def _undecided(verdict: Verdict) -> bool:
    """Whether the checks of the patches that stay may still change ``verdict``: its
    own checks left it droppable, or said nothing either way."""
    return verdict.verdict == DROPPABLE or (
        verdict.verdict == NOT_EVALUATED and verdict.missing == ("condition",)
    )


def _verdict(
    entry: PatchEntry,
    verdict: kinds.Verdict,
    evidence: str,
    outcome: Outcome | None,
    *,
    without: dict[str, str] | None = None,
    with_patch: dict[str, str] | None = None,
    missing: tuple[str, ...] = (),
) -> Verdict:
    return Verdict(
        name=entry.name,
        verdict=verdict,
        evidence=evidence,
        condition=entry.drop_when,
        upstream_status=outcome.status if outcome is not None else None,
        without=without or {},
        with_patch=with_patch or {},
        missing=missing,
    )


def _upstream_fact(
    entry: PatchEntry, status: str | None, outcome: Outcome | None, target: str
) -> str:
    if status == "upstreamed":
        why = f": {outcome.evidence}" if outcome is not None and outcome.evidence else ""
        return f"upstreamed at {target}{why}"
    if status == "conflict":
        return f"conflicts on {target}: whether it is upstream there is not known until resolved"
    return f"still a change on {target} (it applies there: {status}), so not upstream"


def _without_build(
    entry: PatchEntry, status: str | None, outcome: Outcome | None, target: str
) -> Verdict:
    """A patch decided without a build: upstreamed at the target, or nothing to run."""
    if status == "upstreamed":
        # Already in the target: the series without it is the series with it, so its
        # passes-without checks are its checks on the target itself; dropping it
        # changes nothing whatever drop-when says.
        return _verdict(entry, DROPPABLE, _upstream_fact(entry, status, outcome, target), outcome)
    if entry.drop_when_upstreamed:
        verdict = NOT_EVALUATED if status == "conflict" else NEEDED
        return _verdict(
            entry,
            verdict,
            _upstream_fact(entry, status, outcome, target),
            outcome,
            missing=("resolution",) if status == "conflict" else (),
        )
    what = (
        f"drop-when is text only ({entry.drop_when!r})"
        if entry.drop_when
        else "no drop-when condition"
    )
    return _verdict(
        entry,
        NOT_EVALUATED,
        f"{what} and the patch names no smoke checks: nothing to evaluate (give drop-when "
        "passes-without or upstreamed)",
        outcome,
        missing=("condition",),
    )


def _stay_checks(
    declared: dict[str, tuple[str, ...]], name: str, own: Sequence[str]
) -> dict[str, tuple[str, ...]]:
    """Check id -> the patches that stay without ``name`` and declare it (``smoke:``),
    for the checks ``name``'s own evaluation does not run already."""
    out: dict[str, list[str]] = {}
    for patch, checks in declared.items():
        if patch == name:
            continue
        for cid in checks:
            if cid not in own:
                out.setdefault(cid, []).append(patch)
    return {cid: tuple(owners) for cid, owners in out.items()}


def _with_checks(
    entry: PatchEntry,
    outcome: Outcome | None,
    target: str,
    full: _Run | None,
    without: _Run,
    stays: dict[str, tuple[str, ...]] | None = None,
) -> Verdict:
    stays = stays or {}
    own_ids = [*dict.fromkeys([*entry.drop_when_passes_without, *entry.smoke])]
    ids = [*own_ids, *(c for c in stays if c not in own_ids)]
    got = without.outcomes(ids)
    had = full.outcomes([*entry.smoke, *stays]) if full is not None else {}
    if without.failure is not None:
        return _verdict(
            entry,
            NOT_EVALUATED,
            f"the series without it on {target} could not be built or smoked: {without.failure}",
            outcome,
            missing=("build",),
        )
    # 1. Its own checks: passing with the patch and failing without it is proof.
    for cid in entry.smoke:
        if got.get(cid) in kinds.CHECK_FAILURES and had.get(cid) == "passed":
            return _verdict(
                entry,
                NEEDED,
                f"{cid} passes with the patch and {got[cid]} {without.without_words} on "
                f"{target}: {_gist(without.checks[cid][1])}",
                outcome,
                without=got,
                with_patch=had,
            )
    # 2. The checks of the patches that stay: one that passes with the patch and fails
    # without it shows a patch above uses what this one adds.
    if without.blocked_by is None:
        for cid, owners in stays.items():
            if got.get(cid) in kinds.CHECK_FAILURES and had.get(cid) == "passed":
                return _verdict(
                    entry,
                    NEEDED,
                    f"{cid}, the check of '{owners[0]}' (which stays), passes with the patch "
                    f"and {got[cid]} without it on {target}: '{owners[0]}' needs what it "
                    f"adds: {_gist(without.checks[cid][1])}",
                    outcome,
                    without=got,
                    with_patch=had,
                )
    # 3. The declared conditions: each must hold.
    if entry.drop_when_upstreamed:
        return _verdict(
            entry,
            NOT_EVALUATED if outcome is not None and outcome.status == "conflict" else NEEDED,
            _upstream_fact(entry, outcome.status if outcome else None, outcome, target),
            outcome,
            without=got,
            with_patch=had,
        )
    cond = entry.drop_when_passes_without
    if not cond:
        return _verdict(
            entry,
            NOT_EVALUATED,
            "its smoke checks do not tell it is needed ("
            + ", ".join(_with_and_without(c, full, without) for c in entry.smoke or own_ids)
            + "), and drop-when is text only: nothing says it may go",
            outcome,
            without=got,
            with_patch=had,
            missing=("condition",),
        )
    failed = [c for c in cond if got.get(c) in kinds.CHECK_FAILURES]
    if failed:
        c = failed[0]
        return _verdict(
            entry,
            NEEDED,
            f"{c} {got[c]} {without.without_words} on {target}: {_gist(without.checks[c][1])}",
            outcome,
            without=got,
            with_patch=had,
        )
    not_run = [c for c in cond if got.get(c) != "passed"]
    if not_run:
        reasons = "; ".join(
            f"{c} (tier {c.partition('.')[0]}) not run: {without.why_not_run(c)}" for c in not_run
        )
        return _verdict(
            entry,
            NOT_EVALUATED,
            reasons,
            outcome,
            without=got,
            with_patch=had,
            missing=tuple(dict.fromkeys(without.missing(c) for c in not_run)),
        )
    if without.blocked_by is not None:
        return _verdict(
            entry,
            NOT_EVALUATED,
            f"{', '.join(cond)} pass(es) {without.without_words} on {target}, but it cannot "
            f"be dropped alone: drop or rework '{without.blocked_by}' with it",
            outcome,
            without=got,
            with_patch=had,
            missing=(f"rework of {without.blocked_by}",),
        )
    # The patches that stay must pass their own checks without it too.
    broken = [c for c in stays if got.get(c) in kinds.CHECK_FAILURES]
    if broken:
        c = broken[0]
        return _verdict(
            entry,
            NOT_EVALUATED,
            f"{', '.join(cond)} pass(es) without the patch on {target}, but {c}, the check "
            f"of '{stays[c][0]}', {got[c]} there with every patch as well: the series is "
            f"broken without it or not; fix that first: {_gist(without.checks[c][1])}",
            outcome,
            without=got,
            with_patch=had,
            missing=(f"a passing {c}",),
        )
    unknown = [c for c in stays if got.get(c) != "passed"]
    if unknown:
        return _verdict(
            entry,
            NOT_EVALUATED,
            f"{', '.join(cond)} pass(es) without the patch on {target}, but the checks of "
            "the patches that stay did not all run: "
            + "; ".join(
                f"{c} of '{stays[c][0]}' not run: {without.why_not_run(c)}" for c in unknown
            ),
            outcome,
            without=got,
            with_patch=had,
            missing=tuple(dict.fromkeys(without.missing(c) for c in unknown)),
        )
    return _verdict(
        entry,
        DROPPABLE,
        f"{', '.join(cond)} pass(es) without the patch on {target}"
        + (
            f", and so do the checks of the patches that stay ({', '.join(stays)})" if stays else ""
        ),
        outcome,
        without=got,
        with_patch=had,
    )


def _with_and_without(cid: str, full: _Run | None, without: _Run) -> str:
    """``static.x: not-run with, not-run without (needs the module 'torch' ...)``."""
    had = full.checks.get(cid, ("?", ""))[0] if full is not None else "?"
    got = without.checks.get(cid, ("?", ""))[0]
    text = f"{cid}: {had} with, {got} without"
    if "not-run" in (had, got):
        source = without if got == "not-run" else full
        assert source is not None
        text += f" ({source.why_not_run(cid)})"
    return text


def print_result(result: DroppableResult, emit: Callable[[str], None] = log.result) -> None:
    """The verdicts: the command's result, on stdout (on stderr beside --json)."""
    emit(
        f"droppable at {result.target} (series based on {result.base}; "
        f"{result.builds} build(s), {result.smokes} smoke(s), {result.seconds:.1f}s)"
    )
    width = max((len(v.name) for v in result.patches), default=10)
    for v in result.patches:
        emit(f"  {v.verdict:<13} {v.name:<{width}}  {v.evidence.splitlines()[0]}")
