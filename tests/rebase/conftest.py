"""Fixtures for the rebase tests: a series on a scratch fork and its later releases."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from support.projects import Scenario, scenario_factory


@pytest.fixture
def scenario(tmp_path, capsys) -> Callable[..., Scenario]:
    """``scenario(files, patches, upstream)``: see :func:`support.projects.scenario_factory`."""
    return scenario_factory(tmp_path, capsys)
