"""Wheels of other versions of a project's series, built in a scratch copy of the project.

``smoke --bisect`` builds prefixes of the series and ``droppable`` the series without
one patch (on the base or on a newer fork release): each writes the series it wants
into the copy's series.yaml and builds it with the overlay path (seconds) from a base
wheel. The copy has the project's patch files and borrows its object store (which
borrows the fork's objects in turn), so nothing of the project itself is written.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from forkpatch.errors import PatchApplyError
from forkpatch.project import Project
from forkpatch.series import PatchEntry, Series


class BuildsOnIt(PatchApplyError):
    """Without one patch, a patch above it does not apply: it builds on the dropped lines."""

    def __init__(self, dropped: str, patch: str, message: str) -> None:
        super().__init__(message, tip=f"'{patch}' builds on '{dropped}': drop or rework both")
        self.dropped = dropped
        self.patch = patch


class ScratchBuilds:
    """Overlay builds of variants of ``project``'s series under ``work``."""

    def __init__(self, project: Project, work: Path) -> None:
        self.project = project
        self.work = work
        self.copy = work / "project"
        self.copy.mkdir()
        if project.patches_dir.is_dir():
            shutil.copytree(project.patches_dir, self.copy / project.patches_dir.name)
        self.store = str(project.state_dir / "repo.git")
        self.builds = 0

    def project_for(self, series: Series) -> Project:
        """The scratch project, its series.yaml set to ``series``."""
        scratch = Project(root=self.copy, fork_override=self.store)
        scratch.save_series(series)
        return scratch

    def build(self, series: Series, base_wheel: Path, label: str) -> tuple[Project, Path]:
        """Build ``series`` from ``base_wheel`` into ``work/dist-<label>``; the scratch
        project (for the smoke that follows) and the wheel."""
        from forkpatch.wheels.buildwheel import build_wheel
        from forkpatch.wheels.options import BuildOptions

        scratch = self.project_for(series)
        built = build_wheel(
            scratch,
            BuildOptions(
                mode="overlay", base_wheel=base_wheel, out_dir=self.work / f"dist-{label}"
            ),
        )
        self.builds += 1
        return scratch, built.wheels[0]

    def rebase(self, onto: str) -> Series:
        """Rebase the copy's series onto the fork tag ``onto`` (as ``forkpatch rebase``
        would: upstreamed patches dropped, moved or merged ones rewritten, in the copy
        only) and return it. A conflict raises the rebase's ConflictError."""
        from forkpatch.rebase import RebaseOptions
        from forkpatch.rebase import rebase as run_rebase

        scratch = self.project_for(self.project.series)
        run_rebase(scratch, RebaseOptions(onto=onto))
        return scratch.reload()

    def without(self, series: Series, name: str) -> Series:
        """``series`` without the patch ``name``, as ``git rebase`` would drop it: the
        patches above it are applied again with 3-way merges (each against its own
        pre-image in the whole series, so a patch whose context held the dropped lines
        still applies), and the copy's files of those that changed are rewritten.
        A patch that conflicts without it raises :class:`BuildsOnIt` naming it."""
        from forkpatch.engine import SeriesApplier, diffs_of_commits

        series.get(name)  # a clear error for an unknown name
        rest = [p for p in series.patches if p.name != name]
        scratch = self.project_for(series)
        store = scratch.fork().store
        whole = SeriesApplier(store, series.base.commit).run(scratch.items())
        bases = {r.name: r.images for r in whole.results}
        applied = SeriesApplier(store, series.base.commit, three_way=True, merge_bases=bases).run(
            scratch.items(rest), write=True
        )
        bad = applied.first_conflict()
        if bad is not None:
            raise BuildsOnIt(
                name,
                bad.name,
                f"without '{name}', patch '{bad.name}' does not apply: "
                + "; ".join(c.reason for c in bad.conflicts),
            )
        moved = [r for r in applied.results if r.commit and r.status != "clean"]
        diffs = diffs_of_commits(store, [r.commit for r in moved if r.commit])
        by_name = {e.name: e for e in rest}
        rewritten: dict[PatchEntry, tuple[str, bytes] | bytes | None] = {}
        for r in moved:
            entry = by_name[r.name]
            patch = scratch.load_patch(entry)
            if patch is not None and r.commit is not None:
                rewritten[entry] = (patch.header, diffs[r.commit])
        scratch.commit(rewritten)
        return series.with_patches(rest)

    @staticmethod
    def below(series: Series, name: str) -> Series:
        """``series`` with only the patches below ``name`` (and every build step but it)."""
        at = series.index(name)
        return series.with_patches(
            p for i, p in enumerate(series.patches) if i < at or (not p.is_diff and i != at)
        )
