"""MARS for Hugging Face ``transformers``' ``Trainer``, built from its ``TrainingArguments``.

``Trainer`` has no ``optim="mars"``, and its ``optimizer_cls_and_kwargs`` hook passes none of the
arguments' learning rate, betas or weight decay. Two ways in, both reading those from ``args``:

- :func:`mars_for_trainer` builds the optimizer over :func:`~torch_mars.mars_param_groups`
  (so GPT-2's ``Conv1D`` weights, stored ``(in, out)``, are marked ``transposed_matrices``), to
  pass as ``Trainer(..., optimizers=(mars_for_trainer(model, args), None))``; the Trainer still
  builds the learning-rate schedule from ``args``.
- :func:`mars_cls_and_kwargs` gives ``(MARS, kwargs)`` for
  ``Trainer(..., optimizer_cls_and_kwargs=...)``, over the Trainer's own decay / no-decay groups
  (its no-decay group sets ``weight_decay=0``, which MARS applies to its 1-D tensors).

Only the approximate mode fits: the Trainer calls ``step()`` without a closure. Nothing here
imports ``transformers``; ``args`` is any object with its ``TrainingArguments`` fields.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from torch_mars.optim import MARS, mars_param_groups
from torch_mars.optim.settings import DEFAULTS
from torch_mars.optim.step_math import ORTHOGONAL_RULES


def mars_kwargs_from_args(args: Any, **overrides: Any) -> dict[str, Any]:
    """MARS's arguments from a ``TrainingArguments``: ``learning_rate`` -> ``lr`` (and the 1-D
    AdamW tensors' rate), ``weight_decay`` (MARS and 1-D tensors alike, as AdamW in the
    Trainer would), ``adam_beta1``/``adam_beta2`` -> ``betas`` and ``betas_1d``,
    ``adam_epsilon`` -> ``eps``. ``overrides`` (``gamma``, ``mars_type``, ...) win."""
    betas = (args.adam_beta1, args.adam_beta2)
    kwargs: dict[str, Any] = {
        "lr": args.learning_rate,
        "lr_1d": args.learning_rate,
        "weight_decay": args.weight_decay,
        "weight_decay_1d": args.weight_decay,
        "betas": betas,
        "betas_1d": betas,
        "eps": args.adam_epsilon,
    }
    kwargs.update(overrides)
    if {**DEFAULTS, **kwargs}["is_approx"] is not True:
        raise ValueError(
            "the Trainer calls step() without a closure, which the exact mode needs: "
            "use is_approx=True"
        )
    return kwargs


def mars_for_trainer(model: nn.Module, args: Any, **overrides: Any) -> MARS:
    """MARS over ``mars_param_groups(model)`` with the settings of ``args`` (see
    :func:`mars_kwargs_from_args`); norms and biases take no weight decay, as in the Trainer's
    own AdamW. ``mars_type="mars-shampoo"`` or ``"mars-m"`` also sends the embeddings to AdamW."""
    kwargs = mars_kwargs_from_args(args, **overrides)
    embeddings = "adamw" if {**DEFAULTS, **kwargs}["mars_type"] in ORTHOGONAL_RULES else "mars"
    groups = mars_param_groups(
        model, embeddings=embeddings, adamw_options={"weight_decay": 0.0, "weight_decay_1d": 0.0}
    )
    return MARS(groups, **kwargs)


def mars_cls_and_kwargs(args: Any, **overrides: Any) -> tuple[type[MARS], dict[str, Any]]:
    """``(MARS, kwargs)`` for ``Trainer(optimizer_cls_and_kwargs=...)``, with the learning rate,
    betas, eps and weight decay of ``args``."""
    return MARS, mars_kwargs_from_args(args, **overrides)
