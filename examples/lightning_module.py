"""Tune optimizers on a Lightning module: ``configure_optimizers`` returns the trial's
optimizer. A small MLP regressing a fixed random function.

    pip install lightning
    python examples/lightning_module.py
"""

from __future__ import annotations

import lightning
import torch

import torch_mars

FEATURES, STEPS, BATCH = 16, 60, 32


def target(x: torch.Tensor) -> torch.Tensor:
    weights = torch.randn(FEATURES, 1, generator=torch.Generator().manual_seed(1234))
    return torch.tanh(x @ weights)


class Regression(lightning.LightningModule):
    def __init__(self, make_optimizer) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(FEATURES, 32), torch.nn.GELU(), torch.nn.Linear(32, 1)
        )
        self.make_optimizer = make_optimizer

    def training_step(self, batch, index):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return self.make_optimizer(self.net)


def train(make_optimizer, seed: int, data_seed: int, report) -> float:
    lightning.seed_everything(seed, verbose=False)
    module = Regression(make_optimizer)
    batches = torch.Generator().manual_seed(10_000 + data_seed)
    inputs = torch.randn(STEPS, BATCH, FEATURES, generator=batches)
    data = [(x, target(x)) for x in inputs]
    trainer = lightning.Trainer(
        max_epochs=1,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader(data, batch_size=None))
    validation = torch.randn(512, FEATURES, generator=torch.Generator().manual_seed(99))
    with torch.no_grad():
        loss = torch.nn.functional.mse_loss(module.net(validation), target(validation)).item()
    report(STEPS, loss)
    return loss


if __name__ == "__main__":
    print(torch_mars.tune(train, optimizers=["adamw", "mars-adamw"], trials=10))
