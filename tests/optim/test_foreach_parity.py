"""The multi-tensor path gives the per-tensor reference path's results in float64 on a mix of
shapes (zero-size, 0-D, 1-D, 2-D, tall 2-D and 4-D conv), for every mars_type, both modes,
and every setting's variant in the settings table (and some combinations); and it groups
tensors by device and dtype."""

from __future__ import annotations

import pytest
import torch

from problems import run_mars
from torch_mars import MARS, MARS_TYPES
from torch_mars.optim.settings import DEFAULTS, SETTINGS, validate_group
from torch_mars.optim.step_types import group_by_device_and_dtype


def valid(group: dict) -> bool:
    """Whether the settings can run together (e.g. mars-lion has no second moment)."""
    try:
        validate_group(group)
    except ValueError:
        return False
    return True


# Every setting's variant from the settings table (a setting added there is tried here), then
# combinations.
OPTIONS = {
    "plain": {},
    **{s.name: {s.name: s.variant} for s in SETTINGS if s.variant is not None},
    "wd-and-1d-wd": {"weight_decay": 0.1, "weight_decay_1d": 0.2},
    "1d-all": {"optimize_1d": True, "amsgrad": True, "weight_decay": 0.05},
    "no-clip-no-skip": {"clip": False, "skip_nonfinite": False},
    "cautious-maximize-1d": {"cautious": True, "maximize": True, "optimize_1d": True},
}
# Every case in the approximate mode; in the exact mode (the table's is_approx variant) the
# combinations, which between them set every variant but transposed_matrices,
# reference_routing and second_moment (which the exact mode's second gradient does not touch).
EXACT = ("plain", "wd-and-1d-wd", "1d-all", "no-clip-no-skip", "cautious-maximize-1d")
CASES = [
    pytest.param(mars_type, is_approx, options, id=f"{mars_type}-{mode}-{name}")
    for mars_type in MARS_TYPES
    for is_approx, mode in ((True, "approx"), (False, "exact"))
    for name, options in OPTIONS.items()
    if "is_approx" not in options
    and (is_approx or name in EXACT)
    and valid({**DEFAULTS, "mars_type": mars_type, "is_approx": is_approx, **options})
]


@pytest.mark.parametrize(("mars_type", "is_approx", "options"), CASES)
def test_foreach_matches_single_tensor(problem, mars_type, is_approx, options):
    kwargs = dict(mars_type=mars_type, is_approx=is_approx, lr=0.02, gamma=0.3, **options)
    loop, loop_opt = run_mars(problem, foreach=False, **kwargs)
    multi, multi_opt = run_mars(problem, foreach=True, **kwargs)
    for a, b in zip(loop, multi, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)
    for a, b in zip(loop_opt.state.values(), multi_opt.state.values(), strict=True):
        assert a.keys() == b.keys()
        for key in a:
            torch.testing.assert_close(a[key], b[key], rtol=1e-12, atol=1e-14)


def test_foreach_handles_mixed_dtypes_in_one_group():
    torch.manual_seed(0)
    params = [torch.randn(4, 3, requires_grad=True), torch.randn(4, 3, dtype=torch.float64)]
    params[1].requires_grad_()
    copies = [p.detach().clone().requires_grad_() for p in params]
    results = []
    for foreach, tensors in ((True, params), (False, copies)):
        opt = MARS(tensors, lr=0.1, foreach=foreach)
        for _ in range(3):
            opt.zero_grad()
            sum((t**3).sum() for t in tensors).backward()
            opt.step()
        results.append([t.detach() for t in tensors])
    for a, b in zip(*results, strict=True):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b)


def test_group_by_device_and_dtype_keeps_first_seen_order():
    tensors = [torch.zeros(1), torch.zeros(1, dtype=torch.float64), torch.zeros(2)]
    assert group_by_device_and_dtype(tensors) == [[0, 2], [1]]
