"""The MARS maths: the optimizer, its functional step paths and the param-group helper.

Besides torch, this package imports only its siblings ``torch_mars.kernels`` (fused steps) and
``torch_mars.distributed`` (sharded steps), which import nothing else of torch-mars: the three
folders can be copied into a project on their own.
"""

from torch_mars.optim.functional import (
    IMPLEMENTATIONS,
    Implementation,
    adamw_step,
    default_foreach,
    fused_backend,
    mars_step,
)
from torch_mars.optim.hyperparams import MARS_TYPES, AdamWHyperparams, MarsHyperparams, MarsType
from torch_mars.optim.mars import MARS, routes_to_mars
from torch_mars.optim.newton_schulz import newton_schulz_orthogonalize
from torch_mars.optim.param_groups import mars_param_groups
from torch_mars.optim.step_tensors import StepTensors

__all__ = [
    "IMPLEMENTATIONS",
    "MARS",
    "MARS_TYPES",
    "AdamWHyperparams",
    "Implementation",
    "MarsHyperparams",
    "MarsType",
    "StepTensors",
    "adamw_step",
    "default_foreach",
    "fused_backend",
    "mars_param_groups",
    "mars_step",
    "newton_schulz_orthogonalize",
    "routes_to_mars",
]
