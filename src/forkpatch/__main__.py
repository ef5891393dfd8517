from __future__ import annotations

from forkpatch.entry import main

raise SystemExit(main())
