"""Count the host-device synchronisations of ``MARS.step`` on CUDA, for every rule, path and
``skip_nonfinite`` setting, with ``torch.cuda.set_sync_debug_mode("warn")`` (each call that
waits for the device warns once per occurrence). The optimizer promises none.

    python benchmarks/reliability/sync_check.py        # needs a CUDA device

Prints a table: rule, path, skip, synchronisations in three steps, and the lines they came from.
"""

from __future__ import annotations

import warnings

import torch

from torch_mars import MARS
from torch_mars.bench.table import markdown_table
from torch_mars.models.gpt import GPT, gpt_config

PATHS = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def syncs_of(mars_type: str, flags: dict, skip: bool) -> tuple[int, str]:
    model = GPT(gpt_config("mini", 256)).cuda()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = MARS(params, lr=1e-3, mars_type=mars_type, skip_nonfinite=skip, **flags)
    for p in params:
        p.grad = torch.randn_like(p)
    opt.step()  # first step: state creation, compilation
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                for p in params:
                    p.grad = torch.randn_like(p)
                opt.step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message).lower()]
    places = dict.fromkeys(f"{w.filename.split('/')[-1]}:{w.lineno}" for w in syncs)
    return len(syncs), ", ".join(list(places)[:3])


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA device")
    rows = []
    for mars_type in ("mars-adamw", "mars-lion", "mars-shampoo"):
        for path, flags in PATHS.items():
            for skip in (True, False):
                count, where = syncs_of(mars_type, flags, skip)
                rows.append([mars_type, path, str(skip), str(count), where])
    print(markdown_table(["rule", "path", "skip_nonfinite", "syncs in 3 steps", "first at"], rows))


if __name__ == "__main__":
    main()
