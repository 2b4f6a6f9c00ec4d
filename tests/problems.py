"""Test problems: a random smooth objective over a mix of tensor shapes, and a driver that
trains it with the library optimizer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from torch_mars import MARS

# A 2-D weight, a tall 2-D weight (Newton-Schulz transposes it), a 4-D conv weight, a 1-D bias,
# a 0-D scalar, a zero-size matrix, and a 1-D tensor that has no gradient on every third step.
MIXED_SHAPES: tuple[tuple[int, ...], ...] = ((6, 5), (9, 4), (3, 2, 2, 2), (7,), (), (0, 4), (5,))
SOMETIMES_UNUSED = len(MIXED_SHAPES) - 1


@dataclass
class RandomProblem:
    """f(x, xi_t) = sum_i s_i/2 |x_i - b_{i,t}|^2 + 0.05 sum sin(3 x_i): smooth, batch-dependent,
    with per-tensor scales s_i chosen so that some corrected gradients get clipped and some not."""

    shapes: tuple[tuple[int, ...], ...]
    steps: int
    seed: int = 0

    def __post_init__(self) -> None:
        gen = torch.Generator().manual_seed(self.seed)
        self.initial = [torch.randn(s, generator=gen, dtype=torch.float64) for s in self.shapes]
        self.scales = [0.02 + 0.4 * torch.rand((), generator=gen).item() for _ in self.shapes]
        self.targets = [
            [torch.randn(s, generator=gen, dtype=torch.float64) for s in self.shapes]
            for _ in range(self.steps)
        ]

    def used(self, index: int, step: int) -> bool:
        return not (index == SOMETIMES_UNUSED and step % 3 == 1)

    def loss(self, params: list[Tensor], step: int) -> Tensor:
        total = torch.zeros((), dtype=params[0].dtype, device=params[0].device)
        for i, (x, b, s) in enumerate(zip(params, self.targets[step], self.scales, strict=True)):
            if self.used(i, step):
                b = b.to(x.device, x.dtype)
                total = total + s / 2 * (x - b).pow(2).sum() + 0.05 * torch.sin(3 * x).sum()
        return total

    def grads(self, params: list[Tensor], step: int) -> list[Tensor | None]:
        leaves = [p.detach().clone().requires_grad_() for p in params]
        self.loss(leaves, step).backward()
        return [leaf.grad for leaf in leaves]


Schedule = Callable[[int], dict[str, float]]


def constant_schedule(step: int) -> dict[str, float]:
    return {}


def take_step(opt: MARS, closure: Callable[[], Tensor], is_approx: bool) -> None:
    """One optimizer step: backward then step (approximate mode), or step(closure) (exact)."""
    if is_approx:
        closure()
        opt.step()
    else:
        opt.step(closure)


def mse_step(
    opt: MARS, model: torch.nn.Module, x: Tensor, y: Tensor, is_approx: bool = True
) -> None:
    """One step of ``opt`` on the mean squared error of ``model(x)`` against ``y``."""

    def closure() -> Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    take_step(opt, closure, is_approx)


def run_mars(
    problem: RandomProblem,
    schedule: Schedule = constant_schedule,
    dtype: torch.dtype = torch.float64,
    device: str = "cpu",
    **kwargs,
) -> tuple[list[Tensor], MARS]:
    """Train fresh copies of ``problem.initial`` with MARS for ``problem.steps`` steps."""
    params = [p.to(device, dtype).clone().requires_grad_() for p in problem.initial]
    opt = MARS(params, **kwargs)
    for step in range(problem.steps):
        for key, value in schedule(step).items():
            opt.param_groups[0][key] = value

        def closure(step: int = step) -> Tensor:
            opt.zero_grad(set_to_none=True)
            loss = problem.loss(params, step)
            loss.backward()
            return loss

        take_step(opt, closure, kwargs.get("is_approx", True))
    return [p.detach() for p in params], opt
