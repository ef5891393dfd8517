from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import smokekit


@pytest.fixture(scope="session")
def example_build(tmp_path_factory: pytest.TempPathFactory) -> smokekit.ExampleBuild:
    """The example fork's overlay wheel and its project (built once per session)."""
    return smokekit.build_example(tmp_path_factory.mktemp("example-build"))
