"""Optimizers by name, one meaning per name in every task; their defaults are rows of the
recipe table (:mod:`.recipes`).

Names:

- ``mars-adamw``, ``mars-lion``, ``mars-shampoo``: :class:`torch_mars.MARS` over
  :func:`~torch_mars.mars_param_groups` (matrices and conv kernels on the MARS rule; norms and
  biases, and for ``mars-shampoo`` the embeddings, on its AdamW path), or over
  ``model.parameters()`` with ``reference_routing=True`` (the authors' routing).
- ``mars-m``: :class:`torch_mars.MARS` with ``mars_type="mars-m"`` (MARS-M: Newton-Schulz on the
  MARS momentum, scaled as in Moonlight), routed as ``mars-shampoo``; its AdamW path shares the
  matrices' lr and weight decay, as in the authors' code.
- ``adamw``: :class:`torch.optim.AdamW` (fused where the device has it); ``lion``: Lion.
- ``nadamw``: :class:`~torch_mars.train.nadamw.NAdamW`, Adam with Nesterov momentum at a
  constant ``mu = beta1`` and decoupled weight decay, over every tensor as ``adamw``. Unclipped
  approximate MARS's first moment unrolls to ``(1 - b1 + gamma b1) g_t + b1 (1 - gamma)
  u_{t-1}`` (``u``: the plain EMA of gradients), a quasi-hyperbolic momentum that is Nesterov's
  at ``gamma = 1 - b1``, so NAdamW is the same-cost control that separates MARS's variance
  reduction from the shape of its momentum. Given ``lr_1d``, ``betas_1d`` or
  ``weight_decay_1d``, it takes MARS-AdamW's routing instead: NAdamW on the tensors
  :func:`~torch_mars.mars_param_groups` puts on the MARS rule, :class:`torch.optim.AdamW` with
  those settings on the rest (MARS-AdamW's 1-D path; ``betas_1d`` defaults to
  ``(0.9, 0.95)``, ``weight_decay_1d`` to 0.1, ``lr_1d`` to ``lr``). ``adamw`` takes the same
  keys and the same routing (AdamW on both parts), so that a tuned comparison gives every Adam
  rule the 1-D settings MARS-AdamW has (:mod:`.search_space`).
- ``nadam``: :class:`torch.optim.NAdam` with decoupled weight decay and its default
  ``momentum_decay``: Dozat's momentum schedule, about ``b1 / 2`` over a short run. Not a
  Nesterov control at ``b1``; kept for comparison with the earlier study.
- ``muon``: :class:`torch.optim.Muon` (Nesterov momentum, its default ``nesterov=True``:
  ``NS((1 - mu) g_t + mu B_t)`` with ``B`` the EMA of gradients) on the hidden 2-D matrices,
  AdamW on everything else (embeddings, norms, biases, and conv kernels, which
  ``torch.optim.Muon`` does not take), as the paper's baseline.
- ``muon-nd``: Newton-Schulz momentum on every MARS-routed tensor, conv kernels included
  (viewed as ``(shape[0], -1)``): ``mars-shampoo`` with ``gamma = 0``. The Muon of models with
  conv kernels, and MARS-Shampoo's base without the variance reduction.

Every default can be overridden. Keys besides the constructors': ``min_lr``, the floor of the
schedule in the units of ``lr`` (a tenth of ``lr`` when not given, as for the CPU-sized
models), and for ``muon`` ``adamw_lr``, ``adamw_betas`` and ``adamw_weight_decay`` for its AdamW
part.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from torch_mars.optim import MARS, mars_param_groups
from torch_mars.optim.step_math import ORTHOGONAL_RULES
from torch_mars.train.lion import Lion
from torch_mars.train.nadamw import NAdamW
from torch_mars.train.recipes import recipe

OPTIMIZER_NAMES: tuple[str, ...] = (
    "mars-adamw",
    "mars-lion",
    "mars-shampoo",
    "mars-m",
    "adamw",
    "muon",
    "muon-nd",
    "lion",
    "nadamw",
    "nadam",
)
# The names built on torch_mars.MARS, and the MARS rule each takes.
MARS_RULE_OF: dict[str, str] = {
    "mars-adamw": "mars-adamw",
    "mars-lion": "mars-lion",
    "mars-shampoo": "mars-shampoo",
    "mars-m": "mars-m",
    "muon-nd": "mars-shampoo",
}


# MARS options beyond the defaults that `--opt-arg` may set: how a step runs (foreach, fused),
# what its state is stored in and what Newton-Schulz runs in (state_dtype, ns_dtype:
# "bfloat16" or "float32"), and the rule's switches (second_moment: "corrected" or
# "gradient").
MARS_OPTIONS = (
    "foreach",
    "fused",
    "state_dtype",
    "ns_dtype",
    "ns_iteration",
    "ns_products",
    "cautious",
    "clip",
    "one_buffer",
    "skip_nonfinite",
    "second_moment",
)
# Muon options beyond the defaults that `--opt-arg` may set: torch.optim.Muon's switch of its
# Nesterov form (on by default; off, it orthogonalises the plain EMA of gradients, as
# MARS-Shampoo at gamma 0 does).
MUON_OPTIONS = ("nesterov",)
STATE_DTYPES_BY_NAME = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# The keys that give `adamw` and `nadamw` MARS-AdamW's routing: an AdamW path of their settings.
ADAMW_PATH_KEYS = ("lr_1d", "betas_1d", "weight_decay_1d")
# The hyperparameters whose value is a name, not a number.
NAME_VALUED_KEYS = ("state_dtype", "ns_dtype", "ns_iteration", "ns_products", "second_moment")

# Floor of the schedule where no min_lr is given (the CPU-sized models): a tenth of the peak lr.
DEFAULT_MIN_LR_RATIO = 0.1


def default_hyperparams(name: str, model: str) -> dict[str, Any]:
    """The default hyperparameters of optimizer ``name`` for the named GPT config ``model``:
    its row of the recipe table (:mod:`.recipes`)."""
    if name not in OPTIMIZER_NAMES:
        raise ValueError(f"optimizer must be one of {OPTIMIZER_NAMES}, got {name!r}")
    return dict(recipe("text", model, name).settings)


class CombinedOptimizer(Optimizer):
    """Several optimizers over disjoint parameters, stepped together (Muon + AdamW). Exposes the
    union of their ``param_groups`` and ``state`` so a schedule can set every lr, and iterates
    over the optimizers (as ``torch.distributed.checkpoint.state_dict`` takes several). It is a
    ``torch.optim.Optimizer``, so that Hugging Face's Trainer and Lightning take it, but holds
    no parameters or state of its own: ``Optimizer.__init__`` is not called."""

    def __init__(self, *optimizers: Optimizer) -> None:
        self.optimizers = optimizers
        self.defaults: dict[str, Any] = {}

    def __iter__(self) -> Iterator[Optimizer]:
        return iter(self.optimizers)

    def __repr__(self) -> str:
        return f"CombinedOptimizer({', '.join(type(o).__name__ for o in self.optimizers)})"

    @property
    def param_groups(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return [group for optimizer in self.optimizers for group in optimizer.param_groups]

    @property
    def state(self) -> dict[Any, Any]:  # type: ignore[override]
        return {p: s for optimizer in self.optimizers for p, s in optimizer.state.items()}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:  # type: ignore[override]
        """Evaluate ``closure`` once (with gradients), then step every optimizer."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for optimizer in self.optimizers:
            optimizer.step()
        return loss

    def state_dict(self) -> dict[str, Any]:
        return {"optimizers": [optimizer.state_dict() for optimizer in self.optimizers]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        states = state_dict.get("optimizers", [])
        if len(states) != len(self.optimizers):
            raise ValueError(
                f"state_dict holds {len(states)} optimizers, expected {len(self.optimizers)}"
            )
        for optimizer, state in zip(self.optimizers, states, strict=True):
            optimizer.load_state_dict(state)


@dataclass
class BuiltOptimizer:
    """An optimizer ready for the trainer, with the schedule floor as a share of the peak lr."""

    optimizer: Optimizer | CombinedOptimizer
    min_ratio: float
    needs_closure: bool


def _split_by_routing(
    model: nn.Module, embeddings: Literal["mars", "adamw"] = "mars", matrices_only: bool = False
) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """The tensors :func:`~torch_mars.mars_param_groups` puts on the MARS rule (with
    ``matrices_only``, its 2-D ones: the hidden matrices ``torch.optim.Muon`` takes, not conv
    kernels) and everything else."""
    groups = mars_param_groups(model, embeddings=embeddings)
    routed = [p for g in groups if g["use_mars"] for p in g["params"]]
    if matrices_only:
        routed = [p for p in routed if p.ndim == 2]
    chosen = {id(p) for p in routed}
    return routed, [p for p in model.parameters() if id(p) not in chosen]


def build_optimizer(
    name: str, model: nn.Module, hyperparams: dict[str, Any], exact: bool = False
) -> BuiltOptimizer:
    """Optimizer ``name`` over ``model``'s parameters with ``hyperparams`` (a task's defaults
    merged in by the caller, e.g. :func:`default_hyperparams`). ``exact`` selects MARS's exact
    mode. An unknown hyperparameter is a ``ValueError`` naming the optimizer."""
    if name not in OPTIMIZER_NAMES:
        raise ValueError(f"optimizer must be one of {OPTIMIZER_NAMES}, got {name!r}")
    if exact and name not in MARS_RULE_OF:
        raise ValueError(f"exact mode is a MARS option; {name!r} has none")
    settings = dict(hyperparams)
    for key in ("lr", "min_lr"):
        value = settings.get(key, 0.0)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ValueError(f"{name}: {key} must be a finite number, got {value!r}")
    min_lr = settings.pop("min_lr", settings["lr"] * DEFAULT_MIN_LR_RATIO)
    if not 0.0 <= min_lr <= settings["lr"]:
        raise ValueError(f"min_lr must be in [0, lr={settings['lr']}], got {min_lr}")
    min_ratio = min_lr / settings["lr"] if settings["lr"] > 0 else 0.0
    try:
        optimizer = _construct(name, model, settings, exact)
    except TypeError as error:  # an unknown keyword in hyperparams
        raise ValueError(f"{name}: {error}") from error
    return BuiltOptimizer(optimizer, min_ratio, needs_closure=exact)


def _construct(
    name: str, model: nn.Module, settings: dict[str, Any], exact: bool
) -> Optimizer | CombinedOptimizer:
    if name in MARS_RULE_OF:
        rule = MARS_RULE_OF[name]
        for key in ("state_dtype", "ns_dtype"):
            dtype = settings.get(key)
            if isinstance(dtype, str):  # --opt-arg state_dtype=bfloat16 (JSON-safe in configs)
                if dtype.removeprefix("torch.") not in STATE_DTYPES_BY_NAME:
                    raise ValueError(
                        f"{name}: {key} must be one of {sorted(STATE_DTYPES_BY_NAME)}, "
                        f"got {dtype!r}"
                    )
                settings[key] = STATE_DTYPES_BY_NAME[dtype.removeprefix("torch.")]
        if name == "muon-nd":
            settings["gamma"] = settings.get("gamma", 0.0)
            if settings["gamma"] != 0.0:
                raise TypeError("muon-nd is mars-shampoo with gamma=0; use mars-shampoo for gamma")
        params: Any = (
            model.parameters()
            if settings.get("reference_routing")
            else mars_param_groups(
                model, embeddings="adamw" if rule in ORTHOGONAL_RULES else "mars"
            )
        )
        return MARS(params, mars_type=rule, is_approx=not exact, **settings)
    if name in ("adamw", "nadamw"):
        fused = next(model.parameters()).device.type == "cuda" or None
        rule: Callable[..., Optimizer] = (
            functools.partial(torch.optim.AdamW, fused=fused) if name == "adamw" else NAdamW
        )
        if not any(key in settings for key in ADAMW_PATH_KEYS):
            return rule(model.parameters(), **settings)
        lr_1d = settings.pop("lr_1d", settings["lr"])
        if isinstance(lr_1d, bool) or not isinstance(lr_1d, int | float) or not lr_1d >= 0:
            raise ValueError(f"{name}: lr_1d must be a number >= 0, got {lr_1d!r}")
        on_mars_rule, rest = _split_by_routing(model)
        adamw = torch.optim.AdamW(
            rest,
            lr=lr_1d,
            betas=settings.pop("betas_1d", (0.9, 0.95)),
            weight_decay=settings.pop("weight_decay_1d", 0.1),
            fused=fused,
        )
        return CombinedOptimizer(rule(on_mars_rule, **settings), adamw)
    if name == "lion":
        return Lion(model.parameters(), **settings)
    if name == "nadam":
        return torch.optim.NAdam(model.parameters(), decoupled_weight_decay=True, **settings)
    if not hasattr(torch.optim, "Muon"):
        raise ValueError(f"muon needs torch.optim.Muon (torch >= 2.9), not in {torch.__version__}")
    momentum = settings.get("momentum", 0.95)
    if isinstance(momentum, bool) or not isinstance(momentum, int | float) or not 0 <= momentum < 1:
        raise ValueError(f"muon: momentum must be in [0, 1), got {momentum!r}")
    if not isinstance(settings.get("nesterov", True), bool):
        raise ValueError(f"muon: nesterov must be true or false, got {settings['nesterov']!r}")
    matrices, rest = _split_by_routing(model, embeddings="adamw", matrices_only=True)
    adamw = torch.optim.AdamW(
        rest,
        lr=settings.pop("adamw_lr"),
        betas=settings.pop("adamw_betas", (0.9, 0.95)),
        weight_decay=settings.pop("adamw_weight_decay", 0.1),
    )
    return CombinedOptimizer(torch.optim.Muon(matrices, **settings), adamw)
