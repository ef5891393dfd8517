"""Wheel builds: the overlay fast path, version identity, the dist alias step, verification."""
