"""A wheel's facts as smoke uses them: :func:`wheel_entry`, the wheel as a smoke report
lists it, and :func:`wheel_vs_series`, the one comparison of a wheel's provenance with a
project's series (the smoke run's provenance check and the bisect's start both use it).
The wheel itself is read by :func:`forkpatch.wheels.wheelinfo.read_wheel`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from forkpatch.smoke.report import WheelEntry

if TYPE_CHECKING:
    from forkpatch.project import Project
    from forkpatch.wheels.identity import Provenance
    from forkpatch.wheels.wheelinfo import WheelInfo


def wheel_entry(info: WheelInfo) -> WheelEntry:
    """The wheel as a smoke report lists it."""
    return WheelEntry(
        info.sha256,
        file=info.path.name,
        name=info.name,
        version=info.version,
        size=info.path.stat().st_size,
    )


def wheel_vs_series(provenance: Provenance, project: Project) -> list[str]:
    """Where a wheel's provenance disagrees with the project's series (empty: it matches):
    the fork, the base, the patches' names, order and bytes, the build steps. How the
    wheel was built (overlay or container) is a fact of one build, not of the series."""
    from forkpatch.wheels.buildwheel import expected_provenance
    from forkpatch.wheels.verify import provenance_diffs

    return provenance_diffs(provenance, expected_provenance(project, provenance.builder))
