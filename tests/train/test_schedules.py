"""Warmup + cosine, warmup-stable-decay and constant schedules."""

from __future__ import annotations

import pytest

from torch_mars.train import Schedule


def test_cosine_warms_up_linearly_then_decays_to_the_floor():
    s = Schedule("cosine", total_steps=110, warmup_steps=10, min_ratio=0.1)
    assert [s(t) for t in range(3)] == pytest.approx([0.1, 0.2, 0.3])
    assert s(10) == pytest.approx(1.0)
    assert s(60) == pytest.approx(0.55)
    assert s(110) == pytest.approx(0.1)
    assert all(s(t) >= s(t + 1) for t in range(10, 120))


def test_wsd_is_flat_until_the_decay_window():
    s = Schedule("wsd", total_steps=100, warmup_steps=5, min_ratio=0.0, decay_fraction=0.2)
    assert s(4) == pytest.approx(1.0)
    assert s(79) == pytest.approx(1.0)
    assert s(90) == pytest.approx(0.5)
    assert s(100) == pytest.approx(0.0)


def test_constant_after_warmup():
    s = Schedule("constant", total_steps=10, warmup_steps=2)
    assert [s(t) for t in range(5)] == pytest.approx([0.5, 1, 1, 1, 1])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "linear"}, "schedule must be one of"),
        ({"total_steps": 0}, "total_steps must be >= 1"),
        ({"warmup_steps": 20}, "warmup_steps must be in"),
        ({"min_ratio": 1.5}, "min_lr / lr must be in"),
        ({"decay_fraction": 0.0}, "decay_fraction must be in"),
    ],
)
def test_bad_schedules_are_rejected(kwargs, message):
    args = {"name": "cosine", "total_steps": 10, **kwargs}
    with pytest.raises(ValueError, match=message):
        Schedule(**args)
