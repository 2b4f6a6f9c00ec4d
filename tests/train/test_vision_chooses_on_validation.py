"""The vision task owns its validation set: a split carved once from the training images (the
same for every run, seed and optimizer, disjoint from what is trained on) is what each epoch is
scored on and what comparisons and searches choose on; the test split is read once, after the
last epoch, for the report."""

from __future__ import annotations

import pytest
import torch

from torch_mars.data.images import ImageDataset
from torch_mars.train.run_record import TASK_METRICS
from torch_mars.train.vision import VisionConfig, validation_split


def images(count: int) -> ImageDataset:
    pixels = torch.arange(count, dtype=torch.int64).remainder(256).to(torch.uint8)
    return ImageDataset(
        pixels.view(count, 1, 1, 1).expand(count, 1, 2, 2).contiguous(),
        torch.arange(count) % 3,
        ("a", "b", "c"),
        "toy",
    )


def test_the_validation_split_is_one_fixed_draw_disjoint_from_training():
    whole = images(200)
    train, validation = validation_split(whole, 0.1)
    assert (len(train), len(validation)) == (180, 20)
    kept = set(train.images[:, 0, 0, 0].tolist())
    held = set(validation.images[:, 0, 0, 0].tolist())
    assert not kept & held and len(kept | held) == 200
    again, again_validation = validation_split(whole, 0.1)  # no seed of a run enters the draw
    assert torch.equal(again_validation.images, validation.images)
    assert torch.equal(again.labels, train.labels)


def test_the_task_chooses_on_validation_accuracy():
    metric = TASK_METRICS["vision"]
    assert metric.key == "val_accuracy" and not metric.lower_is_better


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1])
def test_a_validation_fraction_outside_the_open_interval_is_refused(fraction):
    with pytest.raises(ValueError, match=r"validation_fraction must be in \(0, 1\)"):
        VisionConfig(data="folder:x", validation_fraction=fraction)


def test_a_split_that_leaves_nothing_to_train_on_is_refused_naming_the_argument():
    with pytest.raises(ValueError, match=r"validation_fraction=0\.9 leaves no training image"):
        validation_split(images(2), 0.9)


def test_the_validation_fraction_is_part_of_a_runs_identity():
    first = VisionConfig(data="folder:x").identity("fingerprint")
    other = VisionConfig(data="folder:x", validation_fraction=0.2).identity("fingerprint")
    assert first["validation_fraction"] == 0.1 and first != other
