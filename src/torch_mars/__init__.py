"""torch-mars: the MARS optimizer family (MARS-AdamW, MARS-Lion, MARS-Shampoo) for PyTorch."""

from torch_mars.optim import (
    MARS,
    MARS_TYPES,
    AdamWHyperparams,
    MarsCorrection,
    MarsHyperparams,
    StepInBackward,
    StepTensors,
    adamw_step,
    mars_param_groups,
    mars_step,
    newton_schulz_orthogonalize,
)

__version__ = "0.1.0"

__all__ = [
    "MARS",
    "MARS_TYPES",
    "AdamWHyperparams",
    "MarsCorrection",
    "MarsHyperparams",
    "StepInBackward",
    "StepTensors",
    "__version__",
    "adamw_step",
    "mars_param_groups",
    "mars_step",
    "newton_schulz_orthogonalize",
]
