"""Tune optimizers on a model you did not write: a tiny Vision Transformer from Hugging Face's
``transformers`` (``ViTForImageClassification``) classifying 8x8 images of ten noisy
prototype patterns, in a plain loop.

Your ``train`` builds the library's model from ``seed``, hands it to ``make_optimizer``, reads
the images in the order ``data_seed`` gives and returns the final validation cross-entropy;
``torch_mars.tune`` does the rest. At the budget docs/tuning-your-model.md suggests for a quick
look (``trials=20``) every dimension of every optimizer is tuned, gamma included.

    pip install transformers
    python examples/library_vit.py
"""

from __future__ import annotations

import torch
from transformers import ViTConfig, ViTForImageClassification

import torch_mars

CLASSES, SIDE, STEPS, BATCH = 10, 8, 40, 32


def images(count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` images (1 x 8 x 8) of the ten fixed prototypes plus noise, and their labels."""
    prototypes = torch.randn(CLASSES, 1, SIDE, SIDE, generator=torch.Generator().manual_seed(7))
    labels = torch.randint(0, CLASSES, (count,), generator=generator)
    noise = 0.8 * torch.randn(count, 1, SIDE, SIDE, generator=generator)
    return prototypes[labels] + noise, labels


def train(make_optimizer, seed: int, data_seed: int, report) -> float:
    torch.manual_seed(seed)
    config = ViTConfig(
        image_size=SIDE, patch_size=2, num_channels=1, hidden_size=16, num_hidden_layers=1,
        num_attention_heads=2, intermediate_size=32, num_labels=CLASSES,
    )  # fmt: skip
    model = ViTForImageClassification(config)
    optimizer = make_optimizer(model)
    batches = torch.Generator().manual_seed(10_000 + data_seed)
    val_x, val_y = images(256, torch.Generator().manual_seed(99))

    def validation_loss() -> float:
        with torch.no_grad():
            return model(pixel_values=val_x, labels=val_y).loss.item()

    for step in range(STEPS):
        x, y = images(BATCH, batches)
        loss = model(pixel_values=x, labels=y).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (step + 1) % 10 == 0:
            report(step + 1, validation_loss())
    return validation_loss()


if __name__ == "__main__":
    result = torch_mars.tune(train, optimizers=["adamw", "nadamw", "mars-adamw"], trials=20)
    print(result.answer)
    print("paste into your code:", result.winners)
