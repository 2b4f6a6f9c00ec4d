"""A short real optimisation: a byte-level MLP language model on the Python standard library's
own sources, trained side by side with MARS-AdamW and torch.optim.AdamW from the same
initialisation on the same batches, printing both training losses at every step.

Run it with ``python -m torch_mars.demo [--steps N] [--mars-type TYPE]``.
"""

from __future__ import annotations

import argparse
import sysconfig
import time
from pathlib import Path

import torch
from torch import nn

from torch_mars.optim import MARS, MARS_TYPES, mars_param_groups

CONTEXT = 16
CORPUS_BYTES = 2_000_000


def stdlib_source_bytes(limit: int = CORPUS_BYTES) -> torch.Tensor:
    """Up to ``limit`` bytes of the standard library's top-level ``.py`` files, in name order,
    as a 1-D uint8 tensor."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    chunks, total = [], 0
    for path in sorted(stdlib.glob("*.py")):
        data = path.read_bytes()
        chunks.append(data)
        total += len(data)
        if total >= limit:
            break
    if not chunks:
        raise FileNotFoundError(f"no .py files in the standard library folder {stdlib}")
    return torch.frombuffer(bytearray(b"".join(chunks)[:limit]), dtype=torch.uint8)


class ByteMLP(nn.Module):
    """Next-byte predictor: embed the last ``CONTEXT`` bytes, two hidden layers, 256 logits."""

    def __init__(self, width: int = 256, embed: int = 24) -> None:
        super().__init__()
        self.embed = nn.Embedding(256, embed)
        self.net = nn.Sequential(
            nn.Linear(CONTEXT * embed, width),
            nn.LayerNorm(width),
            nn.GELU(),
            nn.Linear(width, width),
            nn.GELU(),
            nn.Linear(width, 256),
        )

    def forward(self, context: torch.Tensor) -> torch.Tensor:
        """``context``: (batch, CONTEXT) int64 bytes -> (batch, 256) logits."""
        return self.net(self.embed(context).flatten(1))


def batch(data: torch.Tensor, size: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``size`` random windows: contexts (size, CONTEXT) and their next bytes (size,)."""
    starts = torch.randint(0, data.numel() - CONTEXT - 1, (size,), generator=gen)
    windows = data[starts[:, None] + torch.arange(CONTEXT + 1)].long()
    return windows[:, :CONTEXT], windows[:, CONTEXT]


def main(argv: list[str] | None = None) -> list[tuple[float, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps (default 60)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--mars-type", choices=MARS_TYPES, default="mars-adamw")
    parser.add_argument("--lr", type=float, default=3e-3, help="lr of both optimizers")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch_size < 1:
        parser.error("--steps and --batch-size must be >= 1")

    torch.manual_seed(args.seed)
    data = stdlib_source_bytes()
    split = int(0.9 * data.numel())
    train, held_out = data[:split], data[split:]
    mars_model = ByteMLP()
    adamw_model = ByteMLP()
    adamw_model.load_state_dict(mars_model.state_dict())
    optimizers = (
        MARS(mars_param_groups(mars_model), lr=args.lr, lr_1d=args.lr, mars_type=args.mars_type),
        torch.optim.AdamW(adamw_model.parameters(), lr=args.lr, betas=(0.9, 0.95)),
    )
    models = (mars_model, adamw_model)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed)
    print(
        f"{data.numel():,} bytes of Python stdlib source; {args.mars_type} vs AdamW, lr={args.lr}"
    )
    print(f"{'step':>5} {'MARS loss':>10} {'AdamW loss':>11}")
    history = []
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        x, y = batch(train, args.batch_size, gen)
        losses = []
        for model, opt in zip(models, optimizers, strict=True):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        history.append((losses[0], losses[1]))
        print(f"{step:>5} {losses[0]:>10.4f} {losses[1]:>11.4f}")
    with torch.no_grad():
        x, y = batch(held_out, 4096, gen)
        held = [loss_fn(model(x), y).item() for model in models]
    print(
        f"held-out loss after {args.steps} steps: MARS {held[0]:.4f}, AdamW {held[1]:.4f} "
        f"({time.perf_counter() - start:.1f} s)"
    )
    return history


if __name__ == "__main__":
    main()
