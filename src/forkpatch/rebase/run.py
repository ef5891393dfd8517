"""``forkpatch rebase --onto`` / ``--continue`` / ``--skip`` / ``--abort``: one transaction.

Every step reads the journal's :class:`~forkpatch.rebase.state.RebaseState`,
does its work and writes the next state:

1. ``rebase``: classify the series on the new base, creating its commits in
   the private store (objects only); save series.yaml and patches/ aside and
   write the journal (the commit point); move ``refs/forkpatch/rebase/head``.
2. at a conflict: stop *before* any project file changes, with the conflict
   work tree (:mod:`forkpatch.rebase.conflict`) holding the patches below and
   the conflicting patch with its markers. ``--continue`` records what the human
   did and classifies the rest; ``--skip`` drops the patch and goes on.
3. finish: the changed patch files, the removed ones and series.yaml are
   written as one unit (:func:`forkpatch.fsutil.commit_files`), then the report,
   then the editing stack moves, then the journal goes. The editing work tree's
   move is begun first, where git does it, and runs on another core while the
   files are written (its guard found the tree clean); it is waited for before
   the journal goes. Each of these is idempotent, so a finish that was killed is
   simply run again by ``--continue``; ``--abort`` puts the saved bytes back and
   the stack where it was.

Test hook: ``FORKPATCH_TEST_PAUSE_AFTER=<point>`` makes the process stop itself
(SIGSTOP) at a named point so that a test can SIGKILL it there. Points:
``journal`` (journal written, nothing else), ``files`` (patch files and
series.yaml written), ``report`` (report written).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from forkpatch import log, settings
from forkpatch.engine import TreeState, begin_diffs_of_commits
from forkpatch.errors import ConflictError, StateError, UsageError
from forkpatch.git import FileChange
from forkpatch.kinds import DROPPED_STATUSES
from forkpatch.patchfile import in_line_endings_of, lf_form
from forkpatch.patchtext import PatchTexts, stat_may_change
from forkpatch.project import Project, find_root
from forkpatch.rebase.classifier import Classifier, check_target, classifier_for
from forkpatch.rebase.conflict import ConflictTree
from forkpatch.rebase.plan import Outcome, Plan, RebaseOptions
from forkpatch.rebase.report import RebaseReport
from forkpatch.rebase.state import Journal, RebaseState
from forkpatch.rebase.upstream import replacement
from forkpatch.series import PATCHES_DIR, SERIES_FILE, Series, dump_series, parse_series
from forkpatch.stackstate import StackPosition
from forkpatch.trailer import commit_message

if TYPE_CHECKING:
    from forkpatch.stack import Stack

REPORTS_DIR = "reports"
CONTINUE = "`forkpatch rebase --continue`"
HEAD_REF = "refs/forkpatch/rebase/head"
PAUSE_ENV = "FORKPATCH_TEST_PAUSE_AFTER"


def _pause(point: str) -> None:
    """Test hook: stop here (SIGSTOP) when FORKPATCH_TEST_PAUSE_AFTER names ``point``."""
    if settings.text(PAUSE_ENV) == point:
        print(f"forkpatch: test pause at {point}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)


class RebaseStopped(ConflictError):
    """The rebase stopped at a conflict; ``state`` is where it stands (for ``--json``)."""

    def __init__(self, message: str, *, tip: str, state: RebaseState, worktree: Path) -> None:
        super().__init__(message, tip=tip)
        self.state = state
        self.worktree = worktree


@dataclass(frozen=True)
class RebaseResult:
    """What a finished rebase did."""

    plan: Plan
    report: RebaseReport
    report_paths: tuple[Path, ...]
    written: tuple[str, ...]  # project-relative paths that changed (rewritten or removed)


# --------------------------------------------------------------------------- start


def rebase(project: Project, options: RebaseOptions) -> RebaseResult:
    """Rebase the series onto ``options.onto`` (see the module docstring)."""
    journal = Journal(project)
    if journal.exists():
        raise StateError(
            pending_hint(project.root) or "a rebase is in progress",
            tip="`forkpatch rebase --continue` or `forkpatch rebase --abort`",
        )
    from forkpatch.stack import Stack

    stack = Stack(project)
    stack.begin_guard()  # its `git status` runs while the target is read
    try:
        setup = check_target(project, options.onto)
        position = stack.position("rebase", "rebasing")  # no unsaved work, patches/ taken
        classifier = classifier_for(project, setup, options)
        walk = classifier.walk(0, setup.target.commit, write=True, forecast=True)
        plan = Plan(setup, tuple(walk.outcomes), walk.head)
        # With a stop to come, the merge bases computed so far go into the store as blobs.
        memo = classifier.memo(images=walk.conflict is not None)
        state = journal.start(RebaseState.of(plan, options, memo, position))
        project.fork().store.update_ref(HEAD_REF, state.plan.head)
        _pause("journal")
        if state.phase == "conflict":
            _stop(project, journal, _Stop(state, classifier, walk.stop))
        return _finish(project, journal, state, options.report_dir, stack)
    finally:
        stack.drop_begun()


@dataclass(frozen=True)
class _Stop:
    """A stop to write: the state, its classifier, and the conflicting patch brought in as
    far as it goes (computed by the walk that found it; None: compute it)."""

    state: RebaseState
    classifier: Classifier | None = None
    changes: tuple[list[FileChange], list[str]] | None = None
    recorded: bool = False  # the work tree's changes were just staged (see ConflictTree)


def _resume(project: Project, journal: Journal, state: RebaseState) -> Classifier:
    """The classifier of a resumed rebase (see :meth:`Classifier.resume`)."""
    return Classifier.resume(project.fork(), journal.original_items(), state)


# --------------------------------------------------------------------------- conflicts


def _stop(project: Project, journal: Journal, stop: _Stop) -> NoReturn:
    """Write the conflict work tree, mark it as this stop's, and raise RebaseStopped."""
    state = stop.state
    classifier = stop.classifier or _resume(project, journal, state)
    index = state.conflict_index
    item = classifier.items[index]
    outcome = state.plan.outcomes[index]
    tree = ConflictTree(project)
    changes = stop.changes
    if changes is None:
        store = classifier.git
        with store.reader() as reader:
            changes = classifier.conflict_changes(TreeState(store, reader, state.plan.head), item)
    tree.write_stop(state.plan.head, changes[0], recorded=stop.recorded)
    raws = {fp.path: fp.raw for fp in item.patch.files} if item.patch else {}
    rejects = tree.save_rejects(journal.dir, [(p, raws.get(p, b"")) for p in changes[1]])
    journal.mark_stop(state)
    onto = state.plan.onto
    lines = [f"patch '{item.entry.name}' does not apply to {onto}:"]
    lines += [f"  - {c.reason}" for c in outcome.conflicts]
    if outcome.replaced_by:
        lines.append(f"  {replacement(outcome.replaced_by, onto)}")
    lines.append(
        f"the work tree {tree.path} holds the patches below it and this patch with "
        "conflict markers"
        + (f"; hunks that could not be merged: {', '.join(rejects)}" if rejects else "")
    )
    lines.append("patches/ and series.yaml are unchanged so far")
    raise RebaseStopped(
        "\n".join(lines),
        tip=f"resolve the files in {tree.path}, then run `forkpatch rebase --continue`; or "
        "`forkpatch rebase --skip` to drop this patch, `forkpatch rebase --abort` to stop",
        state=state,
        worktree=tree.path,
    )


def continue_(project: Project, report_dir: Path | None = None) -> RebaseResult:
    """Take the resolved work tree (or finish interrupted writes) and go on."""
    journal = Journal(project)
    state = journal.load()
    if state.phase == "writing":
        stack = _guard_stack(project, state, CONTINUE)
        return _finish(project, journal, state, report_dir, stack)
    tree = ConflictTree(project)
    if not tree.exists() or not journal.holds_stop(state):
        # Killed before the conflict work tree was written: write it now.
        _stop(project, journal, _Stop(state))
    with _finishing_stack(project, state) as stack:
        return _continue(project, journal, state, stack, report_dir)


def _continue(
    project: Project,
    journal: Journal,
    state: RebaseState,
    stack: Stack | None,
    report_dir: Path | None,
) -> RebaseResult:
    """The resolved stop taken (``stack``: the editing stack, its status begun)."""
    tree = ConflictTree(project)
    # git stages the resolution on one core while the series is read on the other.
    staging = tree.begin_record()
    try:
        classifier = _resume(project, journal, state)
    except BaseException:
        staging.drop()  # never left running
        raise
    wt, resolved, changed = tree.record(staging)
    markers = tree.markers(changed)
    if markers:
        raise ConflictError(
            f"conflict markers remain in {', '.join(markers)} (in {tree.path})",
            tip="resolve them, then run `forkpatch rebase --continue` again",
        )
    index = state.conflict_index
    item = classifier.items[index]
    outcome = state.plan.outcomes[index]
    head = state.plan.head
    if not changed:  # the tree is the one below the patch
        outcome = Outcome(
            name=outcome.name,
            status="upstreamed",
            files=outcome.files,
            evidence="resolved by hand to no change: the new base already holds it",
        )
    else:
        # The whole conflict work tree is the resolution, as `git add -A` before `git
        # rebase --continue` would make it: a file the patch did not touch is taken too
        # (moving a change to where upstream moved the code is a resolution), and named.
        extra = sorted(set(changed) - set(outcome.files))
        if extra:
            log.warn(
                f"'{outcome.name}' now also changes {', '.join(extra)} (edited in {tree.path}; "
                "the patch did not touch them before)"
            )
        header = item.patch.header if item.patch else ""
        head = wt.commit_tree(
            resolved,
            [head],
            commit_message(item.entry, header),
            date=classifier.date,
        )
        outcome = Outcome(
            name=outcome.name,
            status="resolved",
            files=outcome.files,
            detail=(*outcome.detail, "conflict resolved by hand"),
            commit=head,
            moved=outcome.moved,
        )
    log.info(f"[{index + 1}/{len(classifier.items)}] {outcome.name} ... {outcome.status}")
    step = _Step(state, outcome, head, classifier, recorded=True, doing=CONTINUE, stack=stack)
    return _go_on(project, journal, step, report_dir)


def skip(project: Project, report_dir: Path | None = None) -> RebaseResult:
    """Drop the conflicting patch from the series and go on."""
    journal = Journal(project)
    state = journal.load()
    if state.phase != "conflict":
        raise UsageError(
            "the rebase is not stopped at a conflict",
            tip="`forkpatch rebase --continue` finishes it",
        )
    index = state.conflict_index
    old = state.plan.outcomes[index]
    outcome = Outcome(
        name=old.name,
        status="skipped",
        files=old.files,
        evidence=f"dropped with `forkpatch rebase --skip` (it conflicted: {old.reasons})",
    )
    log.info(f"[{index + 1}/{len(state.plan.outcomes)}] {outcome.name} ... skipped")
    with _finishing_stack(project, state) as stack:
        classifier = _resume(project, journal, state)
        doing = "`forkpatch rebase --skip`"
        step = _Step(state, outcome, state.plan.head, classifier, doing=doing, stack=stack)
        return _go_on(project, journal, step, report_dir)


@dataclass(frozen=True)
class _Step:
    """The patch a rebase was stopped at, settled: its outcome and the head after it."""

    state: RebaseState
    outcome: Outcome
    head: str
    classifier: Classifier
    recorded: bool = False  # the conflict work tree's changes are staged
    doing: str = CONTINUE  # the command, for a refusal
    stack: Stack | None = None  # the editing stack, its status begun (_finishing_stack)


@contextlib.contextmanager
def _finishing_stack(project: Project, state: RebaseState) -> Iterator[Stack | None]:
    """The editing stack, with the `git status` its guard reads begun, when this step is
    likely to end the rebase (no stop forecast past this one): the status reads the
    editing work tree on another core while the step records and classifies; ended with
    the step if it was not read. None: the rebase holds no stack, or another stop is
    likely (a step that stops leaves the stack alone)."""
    if state.stack is None or any(
        o.status == "conflict" for o in state.plan.outcomes[state.conflict_index + 1 :]
    ):
        yield None
        return
    from forkpatch.stack import Stack

    stack = Stack(project)
    stack.begin_guard()
    try:
        yield stack
    finally:
        stack.drop_begun()


def _go_on(
    project: Project, journal: Journal, step: _Step, report_dir: Path | None
) -> RebaseResult:
    state = step.state
    index = state.conflict_index
    walk = step.classifier.walk(index + 1, step.head, write=True, forecast=False)
    # Past a new conflict the outcomes of the first run (forecasts) stay until then.
    done = len(walk.outcomes)
    outcomes = (
        *state.plan.outcomes[:index],
        step.outcome,
        *walk.outcomes,
        *state.plan.outcomes[index + 1 + done :],
    )
    state = state.with_(
        plan=replace(state.plan, outcomes=outcomes, head=walk.head),
        memo=replace(state.memo, references=step.classifier.references.known()),
    )
    stack = None
    if state.phase == "writing":
        # This step ends the rebase, which moves the editing stack: refused here, before
        # anything but objects is written, when the editing work tree holds edits. A step
        # that stops again leaves the stack alone and need not look at it.
        stack = _guard_stack(project, step.state, step.doing, stack=step.stack)
    journal.save(state)
    project.fork().store.update_ref(HEAD_REF, state.plan.head)
    if state.phase == "conflict":
        _stop(project, journal, _Stop(state, step.classifier, walk.stop, step.recorded))
    return _finish(project, journal, state, report_dir, stack)


def abort(project: Project) -> list[str]:
    """Restore series.yaml, patches/ and the stack exactly as before the rebase."""
    journal = Journal(project)
    state = journal.load()
    _guard_stack(project, state, "`forkpatch rebase --abort`", only_if_moved=True)
    changed = journal.restore(state)
    if state.stack is not None:
        _move_stack(project, state.stack)
    project.fork().store.delete_ref(HEAD_REF)
    journal.clear()
    return changed


# --------------------------------------------------------------------------- finishing


def _new_series(journal: Journal, state: RebaseState) -> Series:
    series = journal.original_series()
    dropped = {o.name for o in state.plan.outcomes if o.status in DROPPED_STATUSES}
    return series.with_base(state.plan.target.base).with_patches(
        p for p in series.patches if p.name not in dropped
    )


def _finish(
    project: Project,
    journal: Journal,
    state: RebaseState,
    report_dir: Path | None,
    stack: Stack | None = None,
) -> RebaseResult:
    """Write the result (idempotent: an interrupted finish is simply run again).
    ``stack``: the editing stack as this command's guard read it (its ``git status``
    says the work tree is clean, so the move to the new base writes only what differs)."""
    assert state.phase == "writing", "finished only once every patch has its outcome"
    if stack is not None and state.stack is not None:
        # Its work tree starts moving now, beside the writing of the files (its guard
        # found it clean): rebuild_on waits for it.
        new_series = _new_series(journal, state)
        stack.begin_rebuild(state.plan.onto_commit, new_series, state.stack.applied, _made(state))
    try:
        return _write_result(project, journal, state, report_dir, stack)
    except BaseException:
        if stack is not None:
            with contextlib.suppress(Exception):  # what failed first is what is said
                stack.end_move()  # the tree is never left half moved
        raise


def _made(state: RebaseState) -> dict[str, str]:
    """The rebase's commit of each patch it keeps: the editing stack is made of them (the
    files are written from them)."""
    return {
        o.name: o.commit
        for o in state.plan.outcomes
        if o.commit and o.status not in DROPPED_STATUSES
    }


def _write_result(
    project: Project,
    journal: Journal,
    state: RebaseState,
    report_dir: Path | None,
    stack: Stack | None,
) -> RebaseResult:
    store = project.fork().store
    series = journal.original_series()
    rels = {
        o.name: f"{PATCHES_DIR}/{entry.file}"
        for o, entry in zip(state.plan.outcomes, series.patches, strict=True)
        if entry.file is not None
    }
    refreshed = [o for o in state.plan.outcomes if o.refresh and o.commit and o.name in rels]
    commits = [o.commit for o in refreshed if o.commit]
    # git diffs the refreshed commits on another core while their old files are read
    # and parsed here.
    begun = begin_diffs_of_commits(store, commits)
    new_texts: dict[str, bytes] = {}
    writes: dict[str, bytes | None] = {}
    try:
        old_texts = {name: journal.original_bytes(rel) for name, rel in rels.items()}
        lf_texts = {o.name: lf_form(old_texts[o.name]) for o in refreshed}
        with PatchTexts(store) as texts:  # one object reader for every rewritten file
            texts.parse_while(
                ((lf_texts[o.name], rels[o.name]) for o in refreshed),
                busy=lambda: not begun.done(),
            )
            diffs = begun.result()
            # A diffstat whose counts the new diff changes is git's to write: those that
            # may be asked for are asked for together, with one git process, begun now.
            texts.begin_stats(
                (None, c)
                for o, c in zip(refreshed, commits, strict=True)
                if stat_may_change(old_texts[o.name], diffs[c])
            )
            for o in state.plan.outcomes:
                rel = rels.get(o.name)
                if rel is None:
                    continue
                old = old_texts[o.name]
                if o.refresh and o.commit:
                    # The file keeps its own form (mail headers, notes, quilt style); a
                    # diffstat is regenerated: see forkpatch.patchtext.
                    new = texts.render(
                        lf_texts[o.name], commit=o.commit, raw_diff=diffs[o.commit], source=rel
                    )
                    new_texts[o.name] = new.data
                    writes[rel] = in_line_endings_of(new.data, old)
                elif o.status in DROPPED_STATUSES:
                    writes[rel] = None
    finally:
        begun.drop()  # never left running (a no-op once read)
    text = dump_series(_new_series(journal, state))
    parse_series(text, path=SERIES_FILE)  # never write what could not be read back
    writes[SERIES_FILE] = text.encode("utf-8")
    # Patch files, removals and series.yaml as one unit: a kill leaves all old or all new.
    journal.write_project(writes)
    project.reload()
    _pause("files")
    plan = state.plan
    from forkpatch.rebase import report as report_mod  # difflib: only when finishing

    # Compared with the journal's copies, so a finish that was interrupted and run
    # again still reports every file the rebase changed.
    changed_files = journal.changed_since(state)
    report = report_mod.build(
        plan,
        series=series,
        texts=report_mod.Texts(old=old_texts, new=new_texts),
        changed_files=changed_files,
        options=report_mod.ReportOptions(
            three_way=state.options.three_way, fuzz=state.options.fuzz
        ),
    )
    dirs = [project.state_dir / REPORTS_DIR]
    if report_dir is not None:
        dirs.append(Path(report_dir))
    paths = report_mod.write(report, dirs)
    _pause("report")
    if state.stack is not None:
        # Rebuilt from the new files (the project was read again once they were
        # written, above), so that build steps keep their place in the stack.
        from forkpatch.stack import Stack

        (stack or Stack(project)).rebuild_on(plan.onto_commit, state.stack.applied, _made(state))
    store.delete_ref(HEAD_REF)
    store.repack_if_many()  # each stop's commits came as one small pack
    journal.clear()
    return RebaseResult(
        plan=plan, report=report, report_paths=tuple(paths), written=tuple(changed_files)
    )


# --------------------------------------------------------------------------- the stack


def _guard_stack(
    project: Project,
    state: RebaseState,
    doing: str,
    *,
    only_if_moved: bool = False,
    stack: Stack | None = None,
) -> Stack | None:
    """Before a rebase step that moves the editing stack changes anything: refuse when
    the editing work tree holds edits that are in no object (see Stack.guard_worktree).
    ``only_if_moved``: only when the stack is no longer where the rebase found it.
    ``stack``: this command's (its status may be running already: _finishing_stack).
    Returns the stack as the guard read it (None: the rebase holds none)."""
    from forkpatch.stack import Stack

    if state.stack is None:
        return None
    stack = stack or Stack(project)
    stack.guard_move(
        doing,
        conflict_tree=ConflictTree(project).path,
        unless_at=state.stack.head if only_if_moved else None,
    )
    return stack


def _move_stack(project: Project, position: StackPosition) -> None:
    from forkpatch.stack import Stack

    Stack(project).put_back(position)


# --------------------------------------------------------------------------- telling the user


def stopped_json(project: Project, stopped: RebaseState | None = None) -> dict[str, object] | None:
    """What `rebase --json` prints when the rebase stops at a conflict: where it
    stopped, the work tree to resolve in, and every patch's outcome so far."""
    journal = Journal(project)
    try:
        state = stopped or journal.load()
    except Exception:
        return None
    written = stopped is not None or journal.holds_stop(state)
    plan = state.plan
    return {
        "status": "stopped" if state.phase == "conflict" else state.phase,
        "onto": plan.onto,
        "onto_commit": plan.onto_commit,
        "base": plan.base,
        "base_commit": plan.base_commit,
        "conflict": state.conflict,
        "worktree": str(ConflictTree(project).path) if written else None,
        "patches": [o.to_json() for o in state.plan.outcomes],
        "next": [
            "forkpatch rebase --continue",
            "forkpatch rebase --skip",
            "forkpatch rebase --abort",
        ],
    }


def pending_hint(cwd: Path) -> str | None:
    """A line telling the user about a rebase in progress in the project at ``cwd``."""
    try:
        project = Project(find_root(cwd))
    except Exception:
        return None
    journal = Journal(project)
    if not journal.exists():
        return None
    try:
        state = journal.load()
    except Exception as exc:
        return (
            f"a rebase journal is in {journal.dir} but cannot be used ({exc}); "
            "`forkpatch rebase --continue` / `--abort` refuse it"
        )
    onto = state.plan.onto
    if state.phase == "conflict":
        if not journal.holds_stop(state):
            return (
                f"a rebase onto {onto} is in progress, stopped at patch "
                f"'{state.conflict}', which conflicts (its work tree was not written "
                "yet): run `forkpatch rebase --continue` to write it, or `forkpatch rebase "
                "--skip` / `forkpatch rebase --abort`"
            )
        return (
            f"a rebase onto {onto} is in progress, stopped at patch "
            f"'{state.conflict}' with conflicts in {ConflictTree(project).path}: resolve "
            "them and run `forkpatch rebase --continue`, or `forkpatch rebase --skip` to "
            "drop that patch, or `forkpatch rebase --abort` to restore everything"
        )
    return (
        f"a rebase onto {onto} was interrupted while writing patches/ and series.yaml: run "
        "`forkpatch rebase --continue` to finish it, or `forkpatch rebase --abort` to "
        "restore everything as it was"
    )
