"""Image classification with the CIFAR ResNet-18: data by name, optimizers by name, the paper's
multistep schedule by epoch, and per-epoch test accuracy and loss.

The optimizer names are the text harness's. MARS takes ``model.parameters()`` as the authors'
vision code does, so 4-D conv weights are MARS-routed (``ndim >= 2``) unless
``reference_routing=True`` sends them to AdamW as that code does. ``muon`` here is Newton-Schulz
momentum on every weight matrix and conv kernel viewed as ``(out, in*kh*kw)``, i.e. MARS-Shampoo
with ``gamma = 0`` (``torch.optim.Muon`` accepts 2-D parameters only).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from tqdm.auto import tqdm

from torch_mars.data.images import (
    ImageDataset,
    channel_stats,
    normalize,
    random_crop_and_flip,
    read_cifar,
    read_fashion_mnist,
    read_image_folder,
)
from torch_mars.models.resnet import ResNet, ResNetConfig
from torch_mars.optim import MARS
from torch_mars.train.metrics import MetricsLogger
from torch_mars.train.trainer import resolve_device

VISION_OPTIMIZERS: tuple[str, ...] = ("mars-adamw", "adamw", "muon", "mars-lion", "mars-shampoo")
DEFAULT_VISION_OPTIMIZERS: tuple[str, ...] = ("mars-adamw", "adamw", "muon")
# `torch-mars compare --task vision`: a budget of minutes on two CPU cores (Fashion-MNIST:
# a width-8 ResNet-18, 10,000 training images, 4 epochs).
VISION_COMPARE_BUDGET: dict[str, Any] = {"width": 8, "epochs": 4, "train_subset": 10_000}
DATA_KINDS: tuple[str, ...] = ("fashion-mnist", "cifar", "folder")
VISION_METRIC_COLUMNS: tuple[str, ...] = (
    "epoch",
    "images",
    "time_s",
    "lr",
    "train_loss",
    "train_accuracy",
    "test_loss",
    "test_accuracy",
)

# Starting hyperparameters (the paper's code: batch 128, weight decay 5e-4, multistep decay);
# the learning rates are starting points, tuned per budget with a grid (docs/results.md).
VISION_DEFAULTS: dict[str, dict[str, Any]] = {
    "adamw": {"lr": 1e-3, "betas": (0.9, 0.999), "weight_decay": 5e-4},
    "mars-adamw": {"lr": 3e-3, "betas": (0.95, 0.99), "gamma": 0.025, "weight_decay": 5e-4},
    "mars-lion": {"lr": 1e-4, "betas": (0.9, 0.99), "gamma": 0.025, "weight_decay": 5e-4},
    "mars-shampoo": {"lr": 2e-2, "betas": (0.95, 0.99), "gamma": 0.025, "weight_decay": 0.0},
    "muon": {"lr": 2e-2, "betas": (0.95, 0.99), "weight_decay": 0.0},
}


def load_vision_data(spec: str) -> tuple[ImageDataset, ImageDataset]:
    """``(train, test)`` from ``KIND:PATH`` with KIND one of :data:`DATA_KINDS`:
    ``fashion-mnist:DIR`` (IDX files), ``cifar:DIR`` (python batches), ``folder:DIR``
    (``DIR/train/<class>/*``, ``DIR/test/<class>/*``)."""
    kind, sep, path = spec.partition(":")
    if not sep or kind not in DATA_KINDS or not path:
        raise ValueError(f"data must be KIND:PATH with KIND one of {DATA_KINDS}, got {spec!r}")
    reader = {
        "fashion-mnist": read_fashion_mnist,
        "cifar": read_cifar,
        "folder": read_image_folder,
    }[kind]
    return reader(Path(path), "train"), reader(Path(path), "test")


def build_vision_optimizer(name: str, model: nn.Module, hyperparams: dict[str, Any]) -> Any:
    """Optimizer ``name`` over ``model.parameters()`` with :data:`VISION_DEFAULTS` updated by
    ``hyperparams``. For MARS rules the 1-D AdamW path (batch-norm gains and biases) takes the
    same learning rate and weight decay unless ``lr_1d`` / ``weight_decay_1d`` are given."""
    if name not in VISION_OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {VISION_OPTIMIZERS}, got {name!r}")
    settings = {**VISION_DEFAULTS[name], **hyperparams}
    try:
        if name == "adamw":
            return torch.optim.AdamW(model.parameters(), **settings)
        settings.setdefault("lr_1d", settings["lr"] if name != "muon" else 1e-3)
        settings.setdefault("weight_decay_1d", settings["weight_decay"])
        if name == "muon":
            return MARS(model.parameters(), mars_type="mars-shampoo", gamma=0.0, **settings)
        return MARS(model.parameters(), mars_type=name, **settings)
    except TypeError as error:  # an unknown keyword in hyperparams
        raise ValueError(f"{name}: {error}") from error


def multistep_factor(epoch: int, epochs: int, milestones: tuple[float, ...], decay: float) -> float:
    """lr multiplier in ``epoch`` (0-based): ``decay`` to the number of milestones passed, each
    milestone a fraction of ``epochs`` (the paper: 0.5 and 0.75 of 200, i.e. epochs 100, 150).

    >>> [multistep_factor(e, 200, (0.5, 0.75), 0.1) for e in (0, 99, 100, 149, 150)]
    [1.0, 1.0, 0.1, 0.1, 0.010000000000000002]
    """
    passed = sum(epoch >= round(fraction * epochs) for fraction in milestones)
    return decay**passed


@dataclass
class VisionConfig:
    """One image-classification run.

    Attributes:
        data: ``KIND:PATH``, see :func:`load_vision_data`.
        optimizer: one of :data:`VISION_OPTIMIZERS`.
        hyperparams: overrides of :data:`VISION_DEFAULTS`.
        width: channels of the ResNet's first stage (64: ResNet-18 as published).
        epochs: passes over the training images.
        batch_size: images per step.
        milestones: fractions of ``epochs`` where the lr is multiplied by ``decay``.
        decay: the multistep factor.
        augment: random crop (zero padding ``crop_padding``) and horizontal flip.
        crop_padding: pixels of padding for the random crop.
        train_subset: train on this many images (a fixed random subset) instead of all.
        seed: initialisation, subset, shuffling and augmentation seed.
        device: ``auto``, ``cpu`` or ``cuda``.
        run_dir: where ``metrics.jsonl``/``metrics.csv`` and ``summary.json`` go.
        quiet: no progress bar, one line per epoch.
    """

    data: str
    optimizer: str = "mars-adamw"
    hyperparams: dict[str, Any] = field(default_factory=dict)
    width: int = 64
    epochs: int = 200
    batch_size: int = 128
    milestones: tuple[float, ...] = (0.5, 0.75)
    decay: float = 0.1
    augment: bool = True
    crop_padding: int = 4
    train_subset: int | None = None
    seed: int = 0
    device: str = "auto"
    run_dir: Path = Path("runs/vision")
    quiet: bool = False

    def __post_init__(self) -> None:
        if self.optimizer not in VISION_OPTIMIZERS:
            raise ValueError(
                f"optimizer must be one of {VISION_OPTIMIZERS}, got {self.optimizer!r}"
            )
        for name in ("width", "epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not all(0.0 < m <= 1.0 for m in self.milestones):
            raise ValueError(f"milestones must be fractions in (0, 1], got {self.milestones}")
        if not 0.0 < self.decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {self.decay}")
        if self.crop_padding < 0:
            raise ValueError(f"crop_padding must be >= 0, got {self.crop_padding}")
        if self.train_subset is not None and self.train_subset < 1:
            raise ValueError(f"train_subset must be >= 1, got {self.train_subset}")
        self.run_dir = Path(self.run_dir)


@dataclass
class VisionResult:
    """What a run ends with: accuracies in [0, 1], losses in nats."""

    optimizer: str
    seed: int
    final_test_accuracy: float
    best_test_accuracy: float
    final_test_loss: float
    epochs: int
    train_images: int
    train_time_s: float
    run_dir: Path


class VisionTrainer:
    """Trains a CIFAR ResNet on ``config.data`` with ``config.optimizer``; :meth:`run` returns a
    :class:`VisionResult` and writes one metrics row per epoch."""

    def __init__(self, config: VisionConfig) -> None:
        self.config = config
        self.device = resolve_device(config.device)
        train, self.test = load_vision_data(config.data)
        generator = torch.Generator().manual_seed(config.seed)
        if config.train_subset is not None and config.train_subset < len(train):
            keep = torch.randperm(len(train), generator=generator)[: config.train_subset]
            train = ImageDataset(train.images[keep], train.labels[keep], train.classes, train.name)
        self.train = train
        self.mean, self.std = channel_stats(train.images)
        torch.manual_seed(config.seed)
        resnet = ResNetConfig(
            num_classes=len(train.classes), in_channels=train.images.shape[1], width=config.width
        )
        self.model = ResNet(resnet).to(self.device)
        self.optimizer = build_vision_optimizer(config.optimizer, self.model, config.hyperparams)
        self.peak_lrs = [group["lr"] for group in self.optimizer.param_groups]

    def _inputs(self, images: Tensor) -> Tensor:
        return normalize(images, self.mean, self.std).to(self.device)

    @torch.no_grad()
    def evaluate(self, batch_size: int = 500) -> tuple[float, float]:
        """Mean cross-entropy and accuracy on the test split."""
        self.model.eval()
        loss_sum, correct = 0.0, 0
        for start in range(0, len(self.test), batch_size):
            images = self.test.images[start : start + batch_size]
            labels = self.test.labels[start : start + batch_size].to(self.device)
            logits = self.model(self._inputs(images))
            loss_sum += float(F.cross_entropy(logits, labels, reduction="sum"))
            correct += int((logits.argmax(1) == labels).sum())
        return loss_sum / len(self.test), correct / len(self.test)

    def _train_epoch(self, epoch: int, bar: tqdm) -> tuple[float, float]:
        config = self.config
        self.model.train()
        generator = torch.Generator().manual_seed(config.seed * 100_003 + epoch)
        order = torch.randperm(len(self.train), generator=generator)
        loss_sum, correct, seen = 0.0, 0, 0
        for start in range(0, len(order), config.batch_size):
            index = order[start : start + config.batch_size]
            images = self.train.images[index]
            if config.augment:
                images = random_crop_and_flip(images, config.crop_padding, generator)
            labels = self.train.labels[index].to(self.device)
            self.optimizer.zero_grad(set_to_none=True)
            logits = self.model(self._inputs(images))
            loss = F.cross_entropy(logits, labels)
            loss.backward()
            self.optimizer.step()
            loss_sum += float(loss.detach()) * len(index)
            correct += int((logits.argmax(1) == labels).sum())
            seen += len(index)
            bar.update(1)
        if not math.isfinite(loss_sum):
            raise FloatingPointError(
                f"{config.optimizer}: training loss is {loss_sum / seen} in epoch {epoch + 1}; "
                "lower the learning rate"
            )
        return loss_sum / seen, correct / seen

    def run(self) -> VisionResult:
        config = self.config
        config.run_dir.mkdir(parents=True, exist_ok=True)
        logger = MetricsLogger(config.run_dir, columns=VISION_METRIC_COLUMNS, x_axis="images")
        steps_per_epoch = math.ceil(len(self.train) / config.batch_size)
        bar = tqdm(
            total=config.epochs * steps_per_epoch,
            disable=config.quiet,
            desc=config.optimizer,
            unit="step",
            leave=False,
        )
        train_time, best = 0.0, 0.0
        test_loss = test_accuracy = math.nan
        for epoch in range(config.epochs):
            factor = multistep_factor(epoch, config.epochs, config.milestones, config.decay)
            for group, peak in zip(self.optimizer.param_groups, self.peak_lrs, strict=True):
                group["lr"] = peak * factor
            began = time.perf_counter()
            train_loss, train_accuracy = self._train_epoch(epoch, bar)
            train_time += time.perf_counter() - began
            test_loss, test_accuracy = self.evaluate()
            best = max(best, test_accuracy)
            row = {
                "epoch": epoch + 1,
                "images": (epoch + 1) * len(self.train),
                "time_s": train_time,
                "lr": self.optimizer.param_groups[0]["lr"],
                "train_loss": train_loss,
                "train_accuracy": train_accuracy,
                "test_loss": test_loss,
                "test_accuracy": test_accuracy,
            }
            logger.log(row)
            if config.quiet:
                print(
                    f"{config.optimizer} epoch {epoch + 1}/{config.epochs}: train {train_loss:.4f}"
                    f" test {test_loss:.4f} acc {100 * test_accuracy:.2f}% ({train_time:.0f} s)",
                    flush=True,
                )
        bar.close()
        logger.close()
        result = VisionResult(
            optimizer=config.optimizer,
            seed=config.seed,
            final_test_accuracy=test_accuracy,
            best_test_accuracy=best,
            final_test_loss=test_loss,
            epochs=config.epochs,
            train_images=len(self.train),
            train_time_s=train_time,
            run_dir=config.run_dir,
        )
        summary = {**asdict(result), "run_dir": str(result.run_dir)}
        summary["config"] = {**asdict(config), "run_dir": str(config.run_dir)}
        (config.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        return result


@dataclass
class VisionSummary:
    """One optimizer's results over its seeds (accuracies in [0, 1])."""

    optimizer: str
    seeds: int
    final_accuracy_mean: float
    final_accuracy_std: float
    best_accuracy_mean: float
    final_loss_mean: float
    train_time_s_mean: float


def run_vision_comparison(
    base: VisionConfig,
    optimizers: list[str],
    seeds: list[int],
    out_dir: Path,
    hyperparams: dict[str, dict[str, Any]],
) -> list[VisionResult]:
    """Train ``base`` once per optimizer and seed, on the same images and budget, into
    ``out_dir/<optimizer>-seed<k>``."""
    results = []
    for name in optimizers:
        for seed in seeds:
            config = replace(
                base,
                optimizer=name,
                seed=seed,
                hyperparams=hyperparams.get(name, {}),
                run_dir=out_dir / f"{name}-seed{seed}",
            )
            results.append(VisionTrainer(config).run())
    return results


def summarise_vision(results: list[VisionResult]) -> list[VisionSummary]:
    """Mean and spread over seeds, one row per optimizer in first-seen order."""
    by_optimizer: dict[str, list[VisionResult]] = {}
    for result in results:
        by_optimizer.setdefault(result.optimizer, []).append(result)
    summaries = []
    for name, runs in by_optimizer.items():
        finals = torch.tensor([r.final_test_accuracy for r in runs], dtype=torch.float64)
        summaries.append(
            VisionSummary(
                optimizer=name,
                seeds=len(runs),
                final_accuracy_mean=float(finals.mean()),
                final_accuracy_std=float(finals.std()) if len(runs) > 1 else 0.0,
                best_accuracy_mean=sum(r.best_test_accuracy for r in runs) / len(runs),
                final_loss_mean=sum(r.final_test_loss for r in runs) / len(runs),
                train_time_s_mean=sum(r.train_time_s for r in runs) / len(runs),
            )
        )
    return summaries


def format_vision_table(summaries: list[VisionSummary]) -> str:
    """A Markdown table, best final test accuracy first."""
    lines = [
        "| optimizer | seeds | final test acc | best test acc | final test loss | time (s) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for s in sorted(summaries, key=lambda s: -s.final_accuracy_mean):
        spread = f" ± {100 * s.final_accuracy_std:.2f}" if s.seeds > 1 else ""
        lines.append(
            f"| {s.optimizer} | {s.seeds} | {100 * s.final_accuracy_mean:.2f}{spread}% "
            f"| {100 * s.best_accuracy_mean:.2f}% | {s.final_loss_mean:.4f} "
            f"| {s.train_time_s_mean:.0f} |"
        )
    return "\n".join(lines)
