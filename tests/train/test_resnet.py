"""The CIFAR ResNet-18: the standard parameter count, the 3x3 stride-1 stem without max-pool,
greyscale input, the stage shapes, and config validation."""

from __future__ import annotations

import pytest
import torch

from torch_mars.models import ResNet, ResNetConfig, resnet18


def test_resnet18_has_the_cifar_parameter_count():
    model = resnet18(num_classes=10)
    assert sum(p.numel() for p in model.parameters()) == 11_173_962


def test_stem_keeps_the_resolution_and_stages_halve_it():
    model = ResNet(ResNetConfig(width=8))
    assert model.stem.kernel_size == (3, 3) and model.stem.stride == (1, 1)
    assert not any(isinstance(m, torch.nn.MaxPool2d) for m in model.modules())
    x = torch.relu(model.bn(model.stem(torch.zeros(1, 3, 32, 32))))
    sizes = []
    for stage in model.stages:
        x = stage(x)
        sizes.append(tuple(x.shape[1:]))
    assert sizes == [(8, 32, 32), (16, 16, 16), (32, 8, 8), (64, 4, 4)]


def test_greyscale_28x28_images_give_logits():
    model = resnet18(num_classes=10, in_channels=1, width=4)
    assert model(torch.zeros(3, 1, 28, 28)).shape == (3, 10)


def test_conv_weights_are_4d_and_would_be_routed_to_mars():
    model = resnet18(width=4)
    conv_weights = [p for n, p in model.named_parameters() if "conv" in n or "stem" in n]
    assert conv_weights and all(p.ndim == 4 for p in conv_weights)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"width": 0}, "width must be >= 1"),
        ({"num_classes": 0}, "num_classes must be >= 1"),
        ({"blocks": ()}, "blocks must be a non-empty tuple"),
    ],
)
def test_config_rejects_bad_sizes(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ResNetConfig(**kwargs)
