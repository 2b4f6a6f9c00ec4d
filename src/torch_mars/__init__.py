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


def tune(*args, **kwargs):
    """Tune optimizers on your own training function by ``torch-mars tune``'s protocol:
    :func:`torch_mars.train.study.objective.tune` (docs/tuning-your-model.md). Needs the
    harness extra (``pip install "torch-mars[harness]"``); the optimizer itself does not."""
    try:
        from torch_mars.train.study.objective import tune as tune_objective
    except ImportError as error:
        raise ImportError(
            f'torch_mars.tune needs the harness extra: pip install "torch-mars[harness]" ({error})'
        ) from None
    return tune_objective(*args, **kwargs)


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
    "tune",
]
