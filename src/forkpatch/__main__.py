from __future__ import annotations

from forkpatch.cli import main

raise SystemExit(main())
