"""What the tests share, by purpose (pytest puts ``tests/`` on the path: ``pythonpath``).

- :mod:`support.git`: scratch git repositories, the test identity, diffs, file trees;
- :mod:`support.cli`: forkpatch's CLI in this process or in a subprocess;
- :mod:`support.projects`: projects to run it on (the example, scratch forks) and what
  the user owns in them;
- :mod:`support.series_styles`: patch series written by the real tools (quilt, diff);
- :mod:`support.wheelfactory`, :mod:`support.venvs`: wheels written with zipfile, venvs, pip;
- :mod:`support.servers`: pypiserver and a fake forge API on 127.0.0.1;
- :mod:`support.containers`: the synthetic fork for the container builds;
- :mod:`support.smoke`, :mod:`support.track`, :mod:`support.github`: the example wheel,
  the tracker's set-ups and CI runs, the GitHub workflow emulation;
- :mod:`support.realfork`: the real-fork tier's fork and pre-checks;
- :mod:`support.reliability`: docs/reliability.md from the hardening suite's tables;
- :mod:`support.tiers`: the quick tier's paths (the ``quick`` marker).

Fixtures live in ``conftest.py`` files (shared ones in ``tests/conftest.py``); this
package holds plain functions and classes, imported by name.
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

# Settings that change what forkpatch itself does, and credentials it would use. A
# developer may have them exported (FORKPATCH_FORK_REPO pointing at the real fork is
# common); no test may see them (tests/conftest.py hides them from every test, and
# support.cli from every forkpatch subprocess), or a test built on the example fork
# would run on the real one, or publish with the developer's password.
HIDDEN_ENV = (
    "FORKPATCH_FORK_REPO",
    "FORKPATCH_BASE_WHEEL",
    "FORKPATCH_PUBLISH_TO",
    "FORKPATCH_DEBUG",
    "FORKPATCH_KEEP_CONTAINER",
    "FORKPATCH_KEEP_SMOKE_ENV",
    "FORKPATCH_TEST_KILL_AT",
    "FORKPATCH_TEST_COUNT_WRITES",
    "FORKPATCH_TEST_PAUSE_AFTER",
    "TWINE_USERNAME",
    "TWINE_PASSWORD",
)
