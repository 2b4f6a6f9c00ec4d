"""Tune optimizers on your own PyTorch loop: a small MLP regressing a fixed random function.

Your ``train`` builds the model from ``seed``, takes the trial's optimizer from
``make_optimizer``, reads its data in the order ``data_seed`` gives, and returns the final
validation loss. ``torch_mars.tune`` runs the fair-fight protocol on it.

    python examples/plain_loop.py
"""

from __future__ import annotations

import torch

import torch_mars

FEATURES, STEPS, BATCH = 16, 60, 32


def target(x: torch.Tensor) -> torch.Tensor:
    weights = torch.randn(FEATURES, 1, generator=torch.Generator().manual_seed(1234))
    return torch.tanh(x @ weights)


def train(make_optimizer, seed: int, data_seed: int, report) -> float:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 32),
        torch.nn.LayerNorm(32),
        torch.nn.GELU(),
        torch.nn.Linear(32, 1),
    )
    optimizer = make_optimizer(model)
    batches = torch.Generator().manual_seed(10_000 + data_seed)
    validation = torch.randn(512, FEATURES, generator=torch.Generator().manual_seed(99))
    for step in range(STEPS):
        x = torch.randn(BATCH, FEATURES, generator=batches)
        loss = torch.nn.functional.mse_loss(model(x), target(x))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (step + 1) % 20 == 0:
            with torch.no_grad():
                report(
                    step + 1,
                    torch.nn.functional.mse_loss(model(validation), target(validation)).item(),
                )
    with torch.no_grad():
        return torch.nn.functional.mse_loss(model(validation), target(validation)).item()


if __name__ == "__main__":
    result = torch_mars.tune(train, optimizers=["adamw", "nadamw", "mars-adamw"], trials=12)
    print(result)
    print("paste into your code:", result.winners)
