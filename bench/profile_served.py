"""Run one forkpatch command under cProfile as the command server runs it.

``python bench/profile_served.py OUT ARGS...`` imports every module the server
imports ahead (``forkpatch.cmdserver.server``), then profiles ``entry.run_here``
with ``ARGS`` as the command line: the profile shows the command's own work, not
the imports a served call never pays. The exit status is the command's.
"""

from __future__ import annotations

import cProfile
import sys
from pathlib import Path


def main() -> int:
    out, args = sys.argv[1], sys.argv[2:]
    import forkpatch
    from forkpatch import entry
    from forkpatch.cmdserver import server

    server._import_ahead(Path(forkpatch.__file__).parent)
    sys.argv = ["forkpatch", *args]
    profile = cProfile.Profile()
    profile.enable()
    try:
        return entry.run_here()
    finally:
        profile.disable()
        profile.dump_stats(out)


if __name__ == "__main__":
    sys.exit(main())
