"""The repository's own patch set (series.yaml + patches/) is valid, with no fork needed.

CI has no clone of the fork, so this is what guards the real series there:
it loads, every patch parses, every path is safe, every entry has its
metadata, every smoke check it names exists, and patches/ has no orphans.
The patches applying to the fork is proven by the real_fork tests beside this one.
"""

from __future__ import annotations

import pytest

from forkpatch.patchfile import check_paths, parse_patch
from forkpatch.project import Project
from forkpatch.series import BUILD_STEPS, load_series
from forkpatch.smoke.checks import registry
from support import REPO_ROOT

ROOT = REPO_ROOT
SERIES = load_series(ROOT / "series.yaml")
EXPECTED = [
    "capability-floor",
    "odd-width-padding",
    "eager-block-cast",
    "packed-repack",
    "vllm-dist-info",
    "cli-version",
]


def test_the_six_patches_in_order_on_the_recorded_base():
    assert SERIES.names() == EXPECTED
    assert SERIES.base.tag == "v1.2.1"
    assert SERIES.base.commit == "4e9fdbc807178baa3bc98a1a59af7af7d3b63131"
    assert SERIES.fork.distribution == "1cat-vllm"


@pytest.mark.parametrize("entry", SERIES.patches, ids=lambda e: e.name)
def test_every_entry_says_what_why_where_from_upstream_status_and_its_checks(entry):
    for field in ("summary", "why", "upstream", "origin", "drop_when"):
        assert getattr(entry, field).strip(), f"{entry.name}: '{field}' is empty"
    assert entry.smoke, f"{entry.name}: names no smoke checks"
    known = set(registry())
    unknown = [c for c in entry.smoke if c not in known]
    assert not unknown, f"{entry.name}: unknown smoke checks {unknown}"


@pytest.mark.parametrize("entry", [e for e in SERIES.patches if e.file], ids=lambda e: e.name)
def test_every_patch_parses_and_touches_only_safe_paths(entry):
    path = ROOT / "patches" / entry.file
    patch = parse_patch(path.read_bytes(), source=f"patches/{entry.file}")
    check_paths(patch)
    assert patch.files, f"{entry.file} has no diff"
    assert patch.header.strip(), f"{entry.file} has no description"
    for fp in patch.files:
        # Patches 1-4 stay out of quantization/fp8.py, which v1.3.0 rewrote.
        if entry.name in EXPECTED[:4]:
            assert fp.path != "vllm/model_executor/layers/quantization/fp8.py"


def test_build_steps_are_known_and_no_patch_file_is_an_orphan():
    for e in SERIES.patches:
        if e.build_step:
            assert e.build_step in BUILD_STEPS
    assert Project(ROOT).orphans() == []
