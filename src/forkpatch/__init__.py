"""forkpatch: manage a series of private patches on top of a fork of vLLM."""

from __future__ import annotations

__version__ = "0.1.0"
