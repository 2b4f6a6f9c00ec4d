"""Image classification with the CIFAR ResNet-18: data by name, the paper's multistep schedule by
epoch, per-epoch validation accuracy and loss on a split carved once from the training images
(what every comparison and search chooses on), and the test split read once, after the last
epoch, for the report; on the harness's shared pieces (optimizer factory,
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
from typing import Any, ClassVar

import torch
from torch import Tensor
from torch.nn import functional as F

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
from torch_mars.train.checkpoint import CheckpointError
from torch_mars.train.optimizers import MARS_RULE_OF, OPTIMIZER_NAMES, build_optimizer
from torch_mars.train.recipes import recipe, with_1d_following_group
from torch_mars.train.run_record import TASK_METRICS, RunResult
from torch_mars.train.run_shell import RUN_CONTROL_FIELDS, check_run_controls, run_loop
from torch_mars.train.runtime import Processes, resolve_device
from torch_mars.train.schedules import Schedule, scale_learning_rates
from torch_mars.train.task import Task, register_task, task_of

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
    "val_loss",
    "val_accuracy",
    "test_loss",
    "test_accuracy",
)
# The draw of the validation split: one for every run, seed and optimizer, so that every
# choice reads the same images.
VALIDATION_SPLIT_SEED = 20_251_129


def vision_hyperparams(name: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """Optimizer ``name``'s vision defaults updated by ``overrides``; a MARS rule's 1-D lr and
    weight decay follow its (overridden) lr and weight decay unless set."""
    if name not in OPTIMIZER_NAMES:
        raise ValueError(f"optimizer must be one of {OPTIMIZER_NAMES}, got {name!r}")
    settings = {**recipe("vision", "*", name).settings, **overrides}
    return with_1d_following_group(settings) if name in MARS_RULE_OF else settings


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


def validation_split(train: ImageDataset, fraction: float) -> tuple[ImageDataset, ImageDataset]:
    """``(train, validation)``: ``fraction`` of ``train``'s images (at least one, and at least
    one left to train on) drawn once by :data:`VALIDATION_SPLIT_SEED`, the same for every run."""
    count = max(1, round(fraction * len(train)))
    if count >= len(train):
        raise ValueError(
            f"validation_fraction={fraction} leaves no training image of {len(train)} "
            f"in {train.name}"
        )
    draw = torch.Generator().manual_seed(VALIDATION_SPLIT_SEED)
    order = torch.randperm(len(train), generator=draw)
    held, kept = order[:count].sort().values, order[count:].sort().values
    return (
        ImageDataset(train.images[kept], train.labels[kept], train.classes, train.name),
        ImageDataset(
            train.images[held], train.labels[held], train.classes, f"{train.name} (validation)"
        ),
    )


@dataclass
class VisionConfig:
    """One image-classification run.

    Attributes:
        data: ``KIND:PATH``, see :func:`load_vision_data`.
        optimizer: one of :data:`~torch_mars.train.optimizers.OPTIMIZER_NAMES`.
        hyperparams: overrides of the recipe table's vision row (:mod:`.recipes`).
        width: channels of the ResNet's first stage (64: ResNet-18 as published).
        epochs: passes over the training images.
        batch_size: images per step.
        milestones: fractions of ``epochs`` where the lr is multiplied by ``decay``.
        decay: the multistep factor.
        augment: random crop (zero padding ``crop_padding``) and horizontal flip.
        crop_padding: pixels of padding for the random crop.
        validation_fraction: the share of the training images held out as the validation split
            (one fixed draw for every run): each epoch is scored on it, and comparisons and
            searches choose on it; the test split is read only after the last epoch.
        train_subset: train on this many of the remaining images (a fixed random subset)
            instead of all.
        seed: initialisation, subset, shuffling and augmentation seed.
        device: ``auto``, ``cpu`` or ``cuda``.
        run_dir: where ``config.json``, ``metrics.jsonl``/``metrics.csv``, ``summary.json`` and
            ``checkpoint.pt`` go.
        quiet: no progress bar, one line per epoch.
        checkpoint_interval: optimizer steps between checkpoints (0: only at the end); a
            checkpoint may fall mid-epoch, and a resume continues from there exactly.
        resume: continue from ``run_dir``'s checkpoint.
        overwrite: start over in a folder that holds an earlier run.
        stop_after: end (checkpointed) after this many optimizer steps.
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
    validation_fraction: float = 0.1
    train_subset: int | None = None
    seed: int = 0
    device: str = "auto"
    run_dir: Path = Path("runs/vision")
    quiet: bool = False
    checkpoint_interval: int = 0
    resume: bool = False
    overwrite: bool = False
    stop_after: int | None = None
    task_name: ClassVar[str] = "vision"

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
        if not 0.0 < self.validation_fraction < 1.0:
            raise ValueError(
                f"validation_fraction must be in (0, 1), got {self.validation_fraction}"
            )
        if self.train_subset is not None and self.train_subset < 1:
            raise ValueError(f"train_subset must be >= 1, got {self.train_subset}")
        check_run_controls(self)
        self.run_dir = Path(self.run_dir)

    def resolved_hyperparams(self) -> dict[str, Any]:
        """The optimizer's vision defaults, with ``hyperparams`` applied."""
        return vision_hyperparams(self.optimizer, self.hyperparams)

    def identity(self, data_fingerprint: str) -> dict[str, Any]:
        """The settings a checkpoint must share with the run that resumes it: every field but
        the run controls, the resolved hyperparameters, and the data by content."""
        settings = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in (*RUN_CONTROL_FIELDS, "device", "data", "hyperparams")
        }
        hyperparams = self.resolved_hyperparams()
        return {
            **{k: list(v) if isinstance(v, tuple) else v for k, v in settings.items()},
            "hyperparams": {
                k: list(v) if isinstance(v, tuple) else v for k, v in hyperparams.items()
            },
            "data_fingerprint": data_fingerprint,
        }


class VisionTrainer:
    """The vision task's loop body: a CIFAR ResNet on ``config.data`` with
    ``config.optimizer``, one optimizer step at a time, a metrics row per epoch; :meth:`train`
    runs it in the run shell (:mod:`.run_shell`). ``data`` (``(train, test)``) may be passed
    to share loaded images between runs; otherwise ``config.data`` is read."""

    metric_columns = VISION_METRIC_COLUMNS
    x_axis = "images"
    sharded = False
    accepts_sharded = False

    def __init__(
        self, config: VisionConfig, data: tuple[ImageDataset, ImageDataset] | None = None
    ) -> None:
        self.config = config
        self.processes = Processes()
        self.device = resolve_device(config.device)
        train, self.test_set = data if data is not None else task_of(config).load_data(config)
        self.data_fingerprint = task_of(config).data_fingerprint((train, self.test_set))
        train, self.validation_set = validation_split(train, config.validation_fraction)
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
        self.hyperparams = config.resolved_hyperparams()
        self.optimizer = build_optimizer(config.optimizer, self.model, self.hyperparams).optimizer
        self.steps_per_epoch = math.ceil(len(train) / config.batch_size)
        self.total_steps = config.epochs * self.steps_per_epoch
        self.schedule = Schedule(
            "multistep",
            self.total_steps,
            milestones=tuple(
                round(fraction * config.epochs) * self.steps_per_epoch
                for fraction in config.milestones
            ),
            decay=config.decay,
        )
        # The epoch under way: its image order, the generator of its order and augmentation,
        # and its running sums (on the device, read once per epoch: no host sync per step).
        self._order = torch.arange(len(train))
        self._generator = torch.Generator()
        self._loss_sum = torch.zeros((), device=self.device)
        self._correct = torch.zeros((), device=self.device)
        self._seen = 0

    def train(self) -> RunResult:
        """Run (or resume) to ``epochs`` or ``stop_after`` in the run shell and return the
        result."""
        return run_loop(self)

    def identity(self) -> dict[str, Any]:
        return self.config.identity(self.data_fingerprint)

    def record(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self.config),
            "hyperparams": self.hyperparams,
            "data_fingerprint": self.data_fingerprint,
            "train_images": len(self.train_set),
            "validation_images": len(self.validation_set),
            "device": str(self.device),
        }

    def _inputs(self, images: Tensor) -> Tensor:
        return normalize(images, self.mean, self.std).to(self.device)

    @torch.no_grad()
    def evaluate(self, dataset: ImageDataset, batch_size: int = 500) -> tuple[float, float]:
        """Mean cross-entropy and accuracy on ``dataset`` (the validation or the test split)."""
        self.model.eval()
        loss_sum = torch.zeros((), device=self.device)
        correct = torch.zeros((), device=self.device)
        for start in range(0, len(dataset), batch_size):
            images = dataset.images[start : start + batch_size]
            labels = dataset.labels[start : start + batch_size].to(self.device)
            logits = self.model(self._inputs(images))
            loss_sum += F.cross_entropy(logits, labels, reduction="sum")
            correct += (logits.argmax(1) == labels).sum()
        total_loss, total_correct = torch.stack([loss_sum, correct]).tolist()
        return total_loss / len(dataset), total_correct / len(dataset)

    def _begin_epoch(self, epoch: int) -> None:
        self._generator = torch.Generator().manual_seed(self.config.seed * 100_003 + epoch)
        self._order = torch.randperm(len(self.train_set), generator=self._generator)
        self._loss_sum = torch.zeros((), device=self.device)
        self._correct = torch.zeros((), device=self.device)
        self._seen = 0

    def run_step(self, step: int, progress: dict[str, Any]) -> dict[str, Any] | None:
        """One step on the next batch of the epoch's order (scheduled lr, augmentation); at
        the epoch's last step, the epoch's training loss and accuracy, an evaluation on the
        validation split (and after the last epoch on the test split too) and the epoch's
        metrics row."""
        config = self.config
        epoch, position = divmod(step, self.steps_per_epoch)
        if position == 0:
            self._begin_epoch(epoch)
        began = time.perf_counter()
        self.model.train()
        index = self._order[position * config.batch_size : (position + 1) * config.batch_size]
        images = self.train_set.images[index]
        if config.augment:
            images = random_crop_and_flip(images, config.crop_padding, self._generator)
        labels = self.train_set.labels[index].to(self.device)
        scale_learning_rates(self.optimizer, self.schedule(step))
        self.optimizer.zero_grad(set_to_none=True)
        logits = self.model(self._inputs(images))
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        self.optimizer.step()
        self._loss_sum += loss.detach() * len(index)
        self._correct += (logits.argmax(1) == labels).sum()
        self._seen += len(index)
        if position < self.steps_per_epoch - 1:
            progress["train_time_s"] += time.perf_counter() - began
            return None
        total_loss, total_correct = torch.stack([self._loss_sum, self._correct]).tolist()
        progress["train_time_s"] += time.perf_counter() - began
        train_loss = progress["last_train_loss"] = total_loss / self._seen
        row: dict[str, Any] = {
            "epoch": epoch + 1,
            "step": step + 1,
            "images": (epoch + 1) * len(self.train_set),
            "time_s": progress["train_time_s"],
            "lr": self.optimizer.param_groups[0]["lr"],
            "train_loss": train_loss,
            "train_accuracy": total_correct / self._seen,
        }
        if math.isfinite(train_loss):
            row["val_loss"], row["val_accuracy"] = self.evaluate(self.validation_set)
            if epoch + 1 == config.epochs:
                row["test_loss"], row["test_accuracy"] = self.evaluate(self.test_set)
        return row

    def log_line(self, row: dict[str, Any]) -> str:
        test = (
            f", test {row['test_loss']:.4f} acc {100 * row['test_accuracy']:.2f}%"
            if "test_accuracy" in row
            else ""
        )
        return (
            f"{self.config.optimizer} epoch {row['epoch']}/{self.config.epochs}: train "
            f"{row['train_loss']:.4f} val {row['val_loss']:.4f} acc "
            f"{100 * row['val_accuracy']:.2f}%{test} ({row['time_s']:.0f} s)"
        )

    def loop_state(self) -> dict[str, Any]:
        return {
            "order": self._order,
            "generator": self._generator.get_state(),
            "loss_sum": self._loss_sum,
            "correct": self._correct,
            "seen": self._seen,
        }

    def restore_loop_state(self, state: Any) -> None:
        """The epoch's order, generator and running sums from a checkpoint (checked)."""
        tensors = {"order": torch.int64, "generator": torch.uint8}
        fits = (
            isinstance(state, dict)
            and all(
                isinstance(state.get(k), Tensor) and state[k].dtype == dtype
                for k, dtype in tensors.items()
            )
            and state["order"].shape == (len(self.train_set),)
            and all(
                isinstance(state.get(k), Tensor) and state[k].shape == ()
                for k in ("loss_sum", "correct")
            )
            and isinstance(state.get("seen"), int)
        )
        if not fits:
            raise CheckpointError(
                f"{self.config.run_dir}: the checkpoint's data position does not fit this run"
            )
        self._order = state["order"]
        self._generator = torch.Generator()
        self._generator.set_state(state["generator"])
        self._loss_sum = state["loss_sum"].to(self.device)
        self._correct = state["correct"].to(self.device)
        self._seen = state["seen"]

    def parameters_finite(self) -> bool:
        return all(bool(torch.isfinite(p.detach()).all()) for p in self.model.parameters())

    def budget(self, steps: int) -> int:
        """Images trained on in ``steps`` steps (whole epochs of the training set; a run
        stopped mid-epoch counts the batches it took)."""
        epochs, position = divmod(steps, self.steps_per_epoch)
        return epochs * len(self.train_set) + min(
            position * self.config.batch_size, len(self.train_set)
        )


def _check_vision_hyperparams(config: VisionConfig) -> None:
    model = ResNet(ResNetConfig(width=1))
    build_optimizer(config.optimizer, model, config.resolved_hyperparams())


VISION_TASK = register_task(
    Task(
        name="vision",
        description="a CIFAR ResNet-18 on labelled images; validation accuracy",
        metric=TASK_METRICS["vision"],
        budget_unit="images",
        command_suffix="-vision",
        config_of_budget=lambda budget: VisionConfig(
            **{**budget, "milestones": tuple(budget["milestones"])}
        ),
        load_data=lambda config: load_vision_data(config.data),
        data_fingerprint=lambda data: "+".join(split.fingerprint() for split in data),
        check_hyperparams=_check_vision_hyperparams,
        setting=lambda config, data: (
            f"{config.data}: ResNet-18 width {config.width}, {config.epochs} epochs",
            f"ResNet-18 on {config.data}",
        ),
        loop=VisionTrainer,
    )
)
