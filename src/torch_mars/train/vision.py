"""Image classification with the CIFAR ResNet-18: data by name, the paper's multistep schedule by
epoch, and per-epoch test accuracy and loss, on the harness's shared pieces (optimizer factory,
schedule, run record, comparison, table and figure).

Optimizer names mean what they mean for text (:mod:`.optimizers`). MARS routes 4-D conv
kernels to its rule as matrices unless ``reference_routing=True`` sends them to AdamW, as the
authors' vision code does; ``muon`` is ``torch.optim.Muon`` on 2-D matrices only (in a ResNet,
the classifier), so ``muon-nd`` (Newton-Schulz momentum on every kernel) is the vision baseline.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
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
from torch_mars.train.metrics import MetricsLogger
from torch_mars.train.optimizers import MARS_RULE_OF, OPTIMIZER_NAMES, build_optimizer
from torch_mars.train.run_record import (
    TASK_METRICS,
    RunResult,
    check_finite,
    write_config,
    write_summary,
)
from torch_mars.train.schedules import Schedule, scale_learning_rates
from torch_mars.train.trainer import resolve_device

DEFAULT_VISION_OPTIMIZERS: tuple[str, ...] = ("mars-adamw", "adamw", "muon-nd")
# `torch-mars compare-vision`: a budget of minutes on two CPU cores (Fashion-MNIST: a width-8
# ResNet-18, 10,000 training images, 4 epochs).
VISION_COMPARE_BUDGET: dict[str, Any] = {"width": 8, "epochs": 4, "train_subset": 10_000}
DATA_KINDS: tuple[str, ...] = ("fashion-mnist", "cifar", "folder")
VISION_METRIC_COLUMNS: tuple[str, ...] = (
    "epoch",
    "step",
    "images",
    "time_s",
    "lr",
    "train_loss",
    "train_accuracy",
    "test_loss",
    "test_accuracy",
)

# The paper's code sets batch 128, weight decay 5e-4 and a multistep decay. Learning rates,
# betas and gamma of AdamW, NAdamW, MARS-AdamW, MARS-Shampoo and muon-nd are the winners of the
# tuned vision study at VISION_COMPARE_BUDGET (docs/results.md, history: study_vision.py);
# the others' rates are starting points. The MARS rules' 1-D AdamW path (batch-norm gains, biases)
# takes the group's lr and weight decay unless lr_1d / weight_decay_1d are given (muon-nd:
# lr_1d 1e-3).
VISION_DEFAULTS: dict[str, dict[str, Any]] = {
    "adamw": {"lr": 2e-3, "betas": (0.9, 0.95), "weight_decay": 5e-4},
    "mars-adamw": {"lr": 4.5e-3, "betas": (0.9, 0.95), "gamma": 0.1, "weight_decay": 5e-4},
    "mars-lion": {"lr": 1e-4, "betas": (0.9, 0.99), "gamma": 0.025, "weight_decay": 5e-4},
    "mars-shampoo": {"lr": 1.3e-2, "betas": (0.9, 0.95), "gamma": 0.05, "weight_decay": 0.0},
    # Moonlight's scale makes MARS-M's rate AdamW's; not tuned on images yet.
    "mars-m": {"lr": 1e-3, "betas": (0.95, 0.99), "gamma": 0.025, "weight_decay": 5e-4},
    "muon-nd": {"lr": 2e-2, "betas": (0.9, 0.95), "weight_decay": 0.0, "lr_1d": 1e-3},
    "muon": {
        "lr": 2e-2,
        "weight_decay": 0.0,
        "momentum": 0.95,
        "adamw_lr": 1e-3,
        "adamw_betas": (0.9, 0.999),
        "adamw_weight_decay": 5e-4,
    },
    "lion": {"lr": 1e-4, "betas": (0.9, 0.99), "weight_decay": 5e-4},
    "nadamw": {"lr": 4.5e-3, "betas": (0.9, 0.999), "weight_decay": 5e-4},
    "nadam": {"lr": 1e-3, "betas": (0.9, 0.999), "weight_decay": 5e-4, "momentum_decay": 4e-3},
}


def vision_hyperparams(name: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """Optimizer ``name``'s vision defaults updated by ``overrides``; a MARS rule's 1-D lr and
    weight decay follow its (overridden) lr and weight decay unless set."""
    if name not in OPTIMIZER_NAMES:
        raise ValueError(f"optimizer must be one of {OPTIMIZER_NAMES}, got {name!r}")
    settings = {**VISION_DEFAULTS[name], **overrides}
    if name in MARS_RULE_OF:
        settings.setdefault("lr_1d", settings["lr"])
        settings.setdefault("weight_decay_1d", settings["weight_decay"])
    return settings


def load_vision_data(spec: str) -> tuple[ImageDataset, ImageDataset]:
    """``(train, test)`` from ``KIND:PATH`` with KIND one of :data:`DATA_KINDS`:
    ``fashion-mnist:DIR`` (IDX files), ``cifar:DIR`` (python batches), ``folder:DIR``
    (``DIR/train/<class>/*``, ``DIR/test/<class>/*``). The test split's labels follow the
    training split's class list, matched by name."""
    kind, sep, path = spec.partition(":")
    if not sep or kind not in DATA_KINDS or not path:
        raise ValueError(f"data must be KIND:PATH with KIND one of {DATA_KINDS}, got {spec!r}")
    if kind == "folder":
        train = read_image_folder(Path(path), "train")
        return train, read_image_folder(Path(path), "test", classes=train.classes)
    reader = read_fashion_mnist if kind == "fashion-mnist" else read_cifar
    train, test = reader(Path(path), "train"), reader(Path(path), "test")
    if test.classes != train.classes:
        raise ValueError(f"{spec}: the test split's classes differ from the training split's")
    return train, test


@dataclass
class VisionConfig:
    """One image-classification run.

    Attributes:
        data: ``KIND:PATH``, see :func:`load_vision_data`.
        optimizer: one of :data:`~torch_mars.train.optimizers.OPTIMIZER_NAMES`.
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
        run_dir: where ``config.json``, ``metrics.jsonl``/``metrics.csv`` and ``summary.json``
            go.
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
        if self.optimizer not in OPTIMIZER_NAMES:
            raise ValueError(f"optimizer must be one of {OPTIMIZER_NAMES}, got {self.optimizer!r}")
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


class VisionTrainer:
    """Trains a CIFAR ResNet on ``config.data`` with ``config.optimizer``; :meth:`train` returns
    a :class:`~torch_mars.train.run_record.RunResult` and writes one metrics row per epoch."""

    def __init__(self, config: VisionConfig) -> None:
        self.config = config
        self.device = resolve_device(config.device)
        train, self.test_set = load_vision_data(config.data)
        generator = torch.Generator().manual_seed(config.seed)
        if config.train_subset is not None and config.train_subset < len(train):
            keep = torch.randperm(len(train), generator=generator)[: config.train_subset]
            train = ImageDataset(train.images[keep], train.labels[keep], train.classes, train.name)
        self.train_set = train
        self.mean, self.std = channel_stats(train.images)
        torch.manual_seed(config.seed)
        resnet = ResNetConfig(
            num_classes=len(train.classes), in_channels=train.images.shape[1], width=config.width
        )
        self.model = ResNet(resnet).to(self.device)
        self.hyperparams = vision_hyperparams(config.optimizer, config.hyperparams)
        self.optimizer = build_optimizer(config.optimizer, self.model, self.hyperparams).optimizer
        self.steps_per_epoch = math.ceil(len(train) / config.batch_size)
        self.schedule = Schedule(
            "multistep",
            config.epochs * self.steps_per_epoch,
            milestones=tuple(
                round(fraction * config.epochs) * self.steps_per_epoch
                for fraction in config.milestones
            ),
            decay=config.decay,
        )

    def _inputs(self, images: Tensor) -> Tensor:
        return normalize(images, self.mean, self.std).to(self.device)

    @torch.no_grad()
    def evaluate(self, batch_size: int = 500) -> tuple[float, float]:
        """Mean cross-entropy and accuracy on the test split."""
        self.model.eval()
        loss_sum = torch.zeros((), device=self.device)
        correct = torch.zeros((), device=self.device)
        for start in range(0, len(self.test_set), batch_size):
            images = self.test_set.images[start : start + batch_size]
            labels = self.test_set.labels[start : start + batch_size].to(self.device)
            logits = self.model(self._inputs(images))
            loss_sum += F.cross_entropy(logits, labels, reduction="sum")
            correct += (logits.argmax(1) == labels).sum()
        total_loss, total_correct = torch.stack([loss_sum, correct]).tolist()
        return total_loss / len(self.test_set), total_correct / len(self.test_set)

    def _train_epoch(self, epoch: int, bar: tqdm) -> tuple[float, float]:
        """One pass over the training images (scheduled lr per step); returns the mean training
        loss and accuracy."""
        config = self.config
        self.model.train()
        generator = torch.Generator().manual_seed(config.seed * 100_003 + epoch)
        order = torch.randperm(len(self.train_set), generator=generator)
        # Summed on the device and read once per epoch: no host sync inside the loop.
        loss_sum = torch.zeros((), device=self.device)
        correct = torch.zeros((), device=self.device)
        seen = 0
        for start in range(0, len(order), config.batch_size):
            index = order[start : start + config.batch_size]
            images = self.train_set.images[index]
            if config.augment:
                images = random_crop_and_flip(images, config.crop_padding, generator)
            labels = self.train_set.labels[index].to(self.device)
            step = epoch * self.steps_per_epoch + start // config.batch_size
            scale_learning_rates(self.optimizer, self.schedule(step))
            self.optimizer.zero_grad(set_to_none=True)
            logits = self.model(self._inputs(images))
            loss = F.cross_entropy(logits, labels)
            loss.backward()
            self.optimizer.step()
            loss_sum += loss.detach() * len(index)
            correct += (logits.argmax(1) == labels).sum()
            seen += len(index)
            bar.update(1)
        total_loss, total_correct = torch.stack([loss_sum, correct]).tolist()
        check_finite(config.optimizer, total_loss / seen, f"epoch {epoch + 1}")
        return total_loss / seen, total_correct / seen

    def train(self) -> RunResult:
        """Train for ``epochs`` and return the result; the loop reads top to bottom: train an
        epoch, evaluate, log."""
        config = self.config
        # Start: the run folder, config.json and the metrics files.
        config.run_dir.mkdir(parents=True, exist_ok=True)
        write_config(
            config.run_dir,
            "vision",
            {
                **dataclasses.asdict(config),
                "hyperparams": self.hyperparams,
                "train_images": len(self.train_set),
                "device": str(self.device),
            },
        )
        logger = MetricsLogger(config.run_dir, columns=VISION_METRIC_COLUMNS, x_axis="images")
        bar = tqdm(
            total=config.epochs * self.steps_per_epoch,
            disable=config.quiet,
            desc=config.optimizer,
            unit="step",
            leave=False,
        )
        train_time, best = 0.0, math.nan
        train_loss = test_accuracy = math.nan
        for epoch in range(config.epochs):
            # Train one epoch (the schedule sets the lr of each step).
            began = time.perf_counter()
            train_loss, train_accuracy = self._train_epoch(epoch, bar)
            train_time += time.perf_counter() - began
            # Evaluate.
            test_loss, test_accuracy = self.evaluate()
            best = TASK_METRICS["vision"].best([best, test_accuracy])
            # Log.
            logger.log(
                {
                    "epoch": epoch + 1,
                    "step": (epoch + 1) * self.steps_per_epoch,
                    "images": (epoch + 1) * len(self.train_set),
                    "time_s": train_time,
                    "lr": self.optimizer.param_groups[0]["lr"],
                    "train_loss": train_loss,
                    "train_accuracy": train_accuracy,
                    "test_loss": test_loss,
                    "test_accuracy": test_accuracy,
                }
            )
            if config.quiet:
                print(
                    f"{config.optimizer} epoch {epoch + 1}/{config.epochs}: train {train_loss:.4f}"
                    f" test {test_loss:.4f} acc {100 * test_accuracy:.2f}% ({train_time:.0f} s)",
                    flush=True,
                )
        # Finish: the result, and summary.json.
        bar.close()
        logger.close()
        result = RunResult(
            task="vision",
            optimizer=config.optimizer,
            seed=config.seed,
            metric=TASK_METRICS["vision"].key,
            final=test_accuracy,
            best=best,
            final_train_loss=train_loss,
            budget=config.epochs * len(self.train_set),
            budget_unit="images",
            train_time_s=train_time,
            steps=config.epochs * self.steps_per_epoch,
            run_dir=config.run_dir,
        )
        write_summary(result)
        return result
