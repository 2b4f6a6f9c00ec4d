"""The MARS maths: the optimizer, its functional step paths and the param-group helper.

Dependencies point one way. :mod:`.step_types` (the step's data: tensor lists, hyperparameter
dataclasses and their validation) imports only torch, and :mod:`.step_math` (the maths every
path shares: coefficients, bias corrections, scaled updates, rule codes, matrix shapes) only
that. ``torch_mars.kernels`` (fused steps) and ``torch_mars.distributed`` (sharded steps) import
these two leaves and nothing else of torch-mars; the optimizer imports them.
Nothing here imports the harness, the models or the data, so ``optim/``, ``kernels/`` and
``distributed/`` can be copied into a project on their own.
"""

from torch_mars.optim.correction import MarsCorrection
from torch_mars.optim.functional import (
    IMPLEMENTATIONS,
    Implementation,
    adamw_step,
    default_foreach,
    fused_backend,
    mars_step,
)
from torch_mars.optim.mars import MARS
from torch_mars.optim.newton_schulz import newton_schulz_orthogonalize
from torch_mars.optim.param_groups import mars_param_groups
from torch_mars.optim.settings import MARS_TYPES, MarsType
from torch_mars.optim.step_in_backward import StepInBackward
from torch_mars.optim.step_plan import routes_to_mars, state_buffer_names
from torch_mars.optim.step_types import (
    AdamWHyperparams,
    MarsHyperparams,
    StepTensors,
)

__all__ = [
    "IMPLEMENTATIONS",
    "MARS",
    "MARS_TYPES",
    "AdamWHyperparams",
    "Implementation",
    "MarsCorrection",
    "MarsHyperparams",
    "MarsType",
    "StepInBackward",
    "StepTensors",
    "adamw_step",
    "default_foreach",
    "fused_backend",
    "mars_param_groups",
    "mars_step",
    "newton_schulz_orthogonalize",
    "routes_to_mars",
    "state_buffer_names",
]
