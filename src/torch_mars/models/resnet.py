"""ResNet-18 in its CIFAR form (He et al. 2016; the variant of the MARS paper's vision results).

The ImageNet stem (7x7 stride-2 convolution and max-pool) is replaced by one 3x3 stride-1
convolution, so 32x32 images keep their resolution into the first stage. Four stages of two
basic blocks each double the channels and halve the resolution from the second stage on;
global average pooling and one linear layer give the logits. ``width`` scales every stage (64 is
the standard network; smaller widths make CPU-sized runs), ``in_channels`` admits greyscale
images.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F


@dataclass(frozen=True)
class ResNetConfig:
    """Shape of a CIFAR ResNet.

    Attributes:
        num_classes: size of the output.
        in_channels: image channels (3 for colour, 1 for greyscale).
        width: channels of the first stage; stages have ``width * (1, 2, 4, 8)``.
        blocks: basic blocks per stage (``(2, 2, 2, 2)`` is ResNet-18).
    """

    num_classes: int = 10
    in_channels: int = 3
    width: int = 64
    blocks: tuple[int, ...] = (2, 2, 2, 2)

    def __post_init__(self) -> None:
        for name in ("num_classes", "in_channels", "width"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.blocks or any(b < 1 for b in self.blocks):
            raise ValueError(f"blocks must be a non-empty tuple of counts >= 1, got {self.blocks}")


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and a residual connection (a 1x1 projection when the
    shape changes)."""

    def __init__(self, in_channels: int, channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_channels != channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(channels),
            )

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    """CIFAR ResNet: ``(batch, in_channels, H, W)`` images to ``(batch, num_classes)`` logits.

    >>> model = ResNet(ResNetConfig(num_classes=10, width=8))
    >>> model(torch.zeros(2, 3, 32, 32)).shape
    torch.Size([2, 10])
    """

    def __init__(self, config: ResNetConfig) -> None:
        super().__init__()
        self.config = config
        width = config.width
        self.stem = nn.Conv2d(config.in_channels, width, 3, stride=1, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(width)
        stages = []
        in_channels = width
        for index, count in enumerate(config.blocks):
            channels = width * 2**index
            blocks = []
            for block in range(count):
                stride = 2 if index > 0 and block == 0 else 1
                blocks.append(BasicBlock(in_channels, channels, stride))
                in_channels = channels
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(in_channels, config.num_classes)

    def forward(self, images: Tensor) -> Tensor:
        x = F.relu(self.bn(self.stem(images)))
        x = self.stages(x)
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet18(num_classes: int = 10, in_channels: int = 3, width: int = 64) -> ResNet:
    """ResNet-18 for CIFAR-sized images (11.2 M parameters at width 64 and 10 classes)."""
    return ResNet(ResNetConfig(num_classes=num_classes, in_channels=in_channels, width=width))
