"""MARS in timm's optimizer registry: after :func:`register_with_timm`, timm's
``create_optimizer_v2(model, "torchmars-adamw")`` and its ``train.py --opt torchmars-adamw``
build this library's optimizer.

The names have no underscore on purpose: timm reads ``"a_b"`` as optimizer ``b`` wrapped by
``a`` (``lookahead_adamw``), so ``"torch_mars"`` would silently build timm's own ``Mars``.
timm's factory puts norms and biases in a group with ``weight_decay=0``; MARS applies a group's
explicit weight decay to its 1-D tensors, so they are not decayed, and they follow the group's
lr. Nothing here imports timm until :func:`register_with_timm` is called.
"""

from __future__ import annotations

from typing import Any

from torch_mars.optim import MARS

# timm name -> MARS's ``mars_type``.
TIMM_NAMES: dict[str, str] = {
    "torchmars-adamw": "mars-adamw",
    "torchmars-lion": "mars-lion",
    "torchmars-shampoo": "mars-shampoo",
    "torchmars-m": "mars-m",
}


def register_with_timm(registry: Any = None) -> tuple[str, ...]:
    """Add :data:`TIMM_NAMES` to ``registry`` (default: timm's ``default_registry``, which
    ``create_optimizer_v2`` reads); registering again replaces the entries. Returns the names.

    Example (with timm installed)::

        from torch_mars.integrations.timm_registry import register_with_timm
        register_with_timm()
        optimizer = timm.optim.create_optimizer_v2(model, "torchmars-adamw", lr=3e-3,
                                                   weight_decay=0.05)
    """
    try:
        from timm.optim import OptimInfo
        from timm.optim._optim_factory import default_registry
    except ImportError as error:
        raise ImportError("register_with_timm needs timm: pip install timm") from error
    registry = default_registry if registry is None else registry
    for name, mars_type in TIMM_NAMES.items():
        registry.register(
            OptimInfo(
                name=name,
                opt_class=MARS,
                description=f"torch-mars MARS ({mars_type}), variance-reduced with 1-D AdamW",
                has_eps=True,
                has_betas=True,
                defaults={"mars_type": mars_type},
            )
        )
    return tuple(TIMM_NAMES)
