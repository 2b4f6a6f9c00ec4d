"""Models the harness trains: GPT-2 (nanoGPT shape) and the CIFAR ResNet-18. No optimizer code
lives here."""

from torch_mars.models.gpt import GPT, GPT_CONFIGS, GPTConfig, gpt_config
from torch_mars.models.resnet import ResNet, ResNetConfig, resnet18

__all__ = ["GPT", "GPT_CONFIGS", "GPTConfig", "ResNet", "ResNetConfig", "gpt_config", "resnet18"]
