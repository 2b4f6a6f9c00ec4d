"""Shared fixtures. Without a GPU, Triton kernels run in its CPU interpreter, so CI checks them:
the variable must be set before any kernel is defined."""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Under pytest-xdist the workers share the machine's cores: one thread each, rather than each
# worker's torch starting a thread per core and the workers contending for them.
if "PYTEST_XDIST_WORKER" in os.environ:
    torch.set_num_threads(1)

from problems import MIXED_SHAPES, RandomProblem


@pytest.fixture
def problem() -> RandomProblem:
    """24 steps of the random problem over every tensor shape MARS must handle."""
    return RandomProblem(MIXED_SHAPES, steps=24)
