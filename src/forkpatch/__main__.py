from __future__ import annotations

from forkpatch.entry import run_here

raise SystemExit(run_here())  # never a command server's: see forkpatch.entry
