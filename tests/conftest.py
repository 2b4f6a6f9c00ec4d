"""Shared fixtures."""

import pytest

from problems import MIXED_SHAPES, RandomProblem


@pytest.fixture
def problem() -> RandomProblem:
    """24 steps of the random problem over every tensor shape MARS must handle."""
    return RandomProblem(MIXED_SHAPES, steps=24)
