"""Tune optimizers on a tabular classifier, with pruning and one dimension of your own.

A small MLP classifies the rows of a synthetic table (numeric features, a nonlinear rule, a
few labels flipped). Its dropout is a dimension of yours: declared once in ``extra_space``,
searched for every optimizer alike and passed to ``train`` by name. ``prune=True`` stops a
trial's run whose validation loss, reported each epoch, is worse than the median of its
optimizer's finished trial runs at that epoch (finalists and held-out runs always finish).

    python examples/tabular_mlp.py
"""

from __future__ import annotations

import torch

import torch_mars

FEATURES, ROWS, EPOCHS, BATCH = 12, 768, 5, 64
# The search's budget of docs/tuning-your-model.md ("What it costs"): 20 trials an optimizer.
TRIALS = 20
DROPOUT = [0.0, 0.1, 0.2, 0.3]


def table(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``rows`` rows of the table and their labels (0 or 1), drawn from ``seed``."""
    draw = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, FEATURES, generator=draw)
    weights = torch.randn(FEATURES, generator=torch.Generator().manual_seed(7))
    score = torch.sin(x @ weights) + x[:, 0] * x[:, 1] - 0.5 * x[:, 2] ** 2 + 0.5
    flipped = torch.rand(rows, generator=draw) < 0.05
    return x, ((score > 0) ^ flipped).long()


TRAIN, VALIDATION = table(ROWS, 1), table(512, 2)


def train(make_optimizer, seed: int, data_seed: int, report, dropout: float = 0.1) -> float:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 48),
        torch.nn.LayerNorm(48),
        torch.nn.GELU(),
        torch.nn.Dropout(dropout),
        torch.nn.Linear(48, 48),
        torch.nn.GELU(),
        torch.nn.Dropout(dropout),
        torch.nn.Linear(48, 2),
    )
    optimizer = make_optimizer(model)
    order = torch.Generator().manual_seed(10_000 + data_seed)
    x, y = TRAIN
    loss = float("nan")
    for epoch in range(EPOCHS):
        model.train()
        for rows in torch.randperm(ROWS, generator=order).split(BATCH):
            batch_loss = torch.nn.functional.cross_entropy(model(x[rows]), y[rows])
            optimizer.zero_grad()
            batch_loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            loss = torch.nn.functional.cross_entropy(model(VALIDATION[0]), VALIDATION[1]).item()
        report(epoch + 1, loss)
    return loss


if __name__ == "__main__":
    result = torch_mars.tune(
        train,
        optimizers=["adamw", "nadamw", "mars-adamw"],
        trials=TRIALS,
        extra_space={"dropout": DROPOUT},
        prune=True,
    )
    print(result)
    print("paste into your code:", result.winners, "and your dimensions:", result.extra_winners)
