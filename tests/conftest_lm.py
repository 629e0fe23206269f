"""Shared fixture for tests that need the miniature model suite (register with
``pytest_plugins = ["conftest_lm"]`` in tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def micro_suite():
    """Folder of the micro miniature suite (3 mini-pythia sizes + mini-bert), built once per
    session or reused from build/cache/model_zoo/micro when its recipe is unchanged (seconds)."""
    from utils.lm import build_suite

    return build_suite("micro", progress=False)
