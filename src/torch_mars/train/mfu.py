"""Model FLOPs utilisation: the training FLOPs a model's tokens cost, counted as 6 x parameters
per token (forward 2, backward 4; PaLM's convention without the attention term), over the
device's dense bf16 rate from its datasheet.

The rate is the vendor's dense (not 2:4 sparse) bf16 tensor-core figure, so MFU is comparable
across papers; a GPU measures less in practice (an H100 multiplies 8192-sided bf16 matrices at
about 790 TFLOP/s). Devices not in the table have no MFU (NaN), never a guessed one.
"""

from __future__ import annotations

import math

import torch

# (substring of torch.cuda.get_device_name, dense bf16 TFLOP/s), first match wins: the more
# specific names come first.
PEAK_BF16_DENSE_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.4),
    ("H200", 989.4),
    ("A100", 312.0),
    ("L40S", 362.1),
    ("L40", 181.0),
    ("L4", 121.0),
)


def peak_bf16_flops(device: torch.device) -> float:
    """The dense bf16 rate of ``device`` in FLOP/s from :data:`PEAK_BF16_DENSE_TFLOPS`; NaN for
    a CPU or a GPU the table does not name."""
    if device.type != "cuda":
        return math.nan
    name = torch.cuda.get_device_name(device)
    for fragment, tflops in PEAK_BF16_DENSE_TFLOPS:
        if fragment in name:
            return tflops * 1e12
    return math.nan


def training_flops_per_token(parameters: int) -> float:
    """FLOPs of one token's forward and backward pass through a model of ``parameters``
    weights: 6 per parameter."""
    return 6.0 * parameters


def model_flops_utilization(flops: float, seconds: float, peak_flops: float) -> float:
    """``flops`` done in ``seconds`` as a fraction of ``peak_flops`` (FLOP/s); NaN when either
    is unknown or zero."""
    if not (seconds > 0 and peak_flops > 0):
        return math.nan
    return flops / seconds / peak_flops
