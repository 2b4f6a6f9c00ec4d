"""Models the harness trains: GPT-2 (nanoGPT shape). No optimizer code lives here."""

from torch_mars.models.gpt import GPT, GPT_CONFIGS, GPTConfig, gpt_config

__all__ = ["GPT", "GPT_CONFIGS", "GPTConfig", "gpt_config"]
