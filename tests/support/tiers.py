"""The quick tier for the edit loop (``python -m pytest -m quick``): patch files,
series.yaml and the code's shape, in well under a minute.

Left out: the other teams' quilt series (``test_import_series_styles.py`` drives quilt,
the stack and the rebase on each style: more than half of the patches folder's time),
and wherever it is, a test that needs a resource or is slow. ``tests/conftest.py``
sets the ``quick`` marker from these paths (relative to ``tests/``).
"""

from __future__ import annotations

QUICK = ("patches/", "codebase/", "project/test_series.py", "patchset/test_repo_series.py")
QUICK_LEFT_OUT = ("patches/test_import_series_styles.py",)
NOT_QUICK = frozenset({"docker", "real_fork", "slow", "cuda"})
# Left out of a plain `python3 -m pytest -q` (a developer's loop): `--all-tiers` or an
# explicit -m runs them; .ci/run does.
OPT_IN = ("slow", "real_fork")


def quick_path(rel: str) -> bool:
    """Whether the test file or folder ``rel`` (relative to tests/) is in the tier."""
    return rel.startswith(QUICK) and not rel.startswith(QUICK_LEFT_OUT)


def holds_quick_tests(rel_dir: str) -> bool:
    """Whether the folder ``rel_dir`` (relative to tests/) is or holds a quick path."""
    return any(q.startswith(rel_dir + "/") or rel_dir.startswith(q.rstrip("/")) for q in QUICK)
