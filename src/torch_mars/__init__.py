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


# The study harness's entry points, imported on first use: the optimizer alone needs only
# torch and numpy, the harness its extra. ``help(torch_mars.tune)`` shows the real signature.
_HARNESS = {
    "tune": ("torch_mars.train.study.objective", "tune"),
    "load_study": ("torch_mars.train.study.objective", "load_study"),
    "TuneResult": ("torch_mars.train.study.objective", "TuneResult"),
    "VerdictEntry": ("torch_mars.train.study.tune_record", "VerdictEntry"),
}


def __getattr__(name: str):
    if name not in _HARNESS:
        raise AttributeError(f"module 'torch_mars' has no attribute {name!r}")
    module_name, attribute = _HARNESS[name]
    try:
        import importlib

        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ImportError(
            f"torch_mars.{name} needs the harness extra: "
            f'pip install -e ".[harness]" in a clone ({error})'
        ) from None
    return getattr(module, attribute)


__all__ = [
    "MARS",
    "MARS_TYPES",
    "AdamWHyperparams",
    "MarsCorrection",
    "MarsHyperparams",
    "StepInBackward",
    "StepTensors",
    "TuneResult",
    "VerdictEntry",
    "__version__",
    "adamw_step",
    "load_study",
    "mars_param_groups",
    "mars_step",
    "newton_schulz_orthogonalize",
    "tune",
]
