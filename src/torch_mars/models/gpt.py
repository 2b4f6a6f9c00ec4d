"""GPT-2 in one file, nanoGPT's shape: pre-LayerNorm blocks without biases, GELU MLPs, dropout 0,
causal attention through ``scaled_dot_product_attention`` and an output head tied to the token
embedding.

Shapes: ``idx`` is ``(batch, time)`` int64 token ids with ``time <= block_size``; logits are
``(batch, time, vocab_size)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F


@dataclass(frozen=True)
class GPTConfig:
    """Size of a GPT. ``vocab_size=None`` takes the vocabulary of the data it is trained on."""

    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    vocab_size: int | None = None

    def __post_init__(self) -> None:
        for name in ("n_layer", "n_head", "n_embd", "block_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")
        if self.vocab_size is not None and self.vocab_size < 1:
            raise ValueError(f"vocab_size must be >= 1 or None, got {self.vocab_size}")


GPT_CONFIGS: dict[str, GPTConfig] = {
    "tiny": GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=32),
    # tiny at twice the width: 4x its non-embedding parameters (the fight's second model)
    "tiny-w64": GPTConfig(n_layer=2, n_head=2, n_embd=64, block_size=32),
    "mini": GPTConfig(n_layer=4, n_head=4, n_embd=128, block_size=128),
    "gpt2-small": GPTConfig(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50304),
    "gpt2-medium": GPTConfig(n_layer=24, n_head=16, n_embd=1024, block_size=1024, vocab_size=50304),
    "gpt2-large": GPTConfig(n_layer=36, n_head=20, n_embd=1280, block_size=1024, vocab_size=50304),
    "gpt2-xl": GPTConfig(n_layer=48, n_head=25, n_embd=1600, block_size=1024, vocab_size=50304),
}


def gpt_config(name: str, data_vocab_size: int) -> GPTConfig:
    """The named config with its vocabulary settled for data of ``data_vocab_size`` tokens."""
    if name not in GPT_CONFIGS:
        raise ValueError(f"model must be one of {sorted(GPT_CONFIGS)}, got {name!r}")
    config = GPT_CONFIGS[name]
    if config.vocab_size is None:
        return GPTConfig(
            config.n_layer, config.n_head, config.n_embd, config.block_size, data_vocab_size
        )
    if data_vocab_size > config.vocab_size:
        raise ValueError(
            f"model {name!r} has vocab_size {config.vocab_size}, smaller than the data's "
            f"{data_vocab_size} tokens"
        )
    return config


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=False)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        batch, time, channels = x.shape
        q, k, v = self.c_attn(x).split(channels, dim=2)
        q, k, v = (
            t.view(batch, time, self.n_head, channels // self.n_head).transpose(1, 2)
            for t in (q, k, v)
        )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(batch, time, channels))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=False)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=False)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=False)
        self.mlp = MLP(config)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """GPT-2 language model.

    Example:
        >>> model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=8, block_size=16, vocab_size=256))
        >>> logits, loss = model(torch.zeros(3, 5, dtype=torch.long), torch.zeros(3, 5).long())
        >>> tuple(logits.shape), loss.shape
        ((3, 5, 256), torch.Size([]))
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if config.vocab_size is None:
            raise ValueError("GPT needs a vocab_size: use gpt_config(name, data_vocab_size)")
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, bias=False)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight
        self.apply(self._init_weights)
        # GPT-2's scaled init of the projections that write into the residual stream.
        for name, param in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(param, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_parameters(self, non_embedding: bool = True) -> int:
        """Parameter count; the position embedding is left out by default, as in GPT-2."""
        total = sum(p.numel() for p in self.parameters())
        return total - self.wpe.weight.numel() if non_embedding else total

    def forward(self, idx: Tensor, targets: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """``idx``, ``targets``: (batch, time) int64. Returns logits (batch, time, vocab) and the
        mean cross-entropy in nats per token when ``targets`` is given."""
        time = idx.shape[1]
        if time > self.config.block_size:
            raise ValueError(f"sequence length {time} exceeds block_size {self.config.block_size}")
        positions = torch.arange(time, device=idx.device)
        x = self.wte(idx) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        return logits, loss
