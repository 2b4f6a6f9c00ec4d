"""A param group's step plan: what its step needs that stays fixed from one step to the next.

Which tensors take the MARS rule and which plain AdamW (:func:`routes_to_mars`), the state
buffers each one owns (:func:`state_buffer_names`), the step path (:func:`step_path`) and the
sharding. ``MARS`` builds a group's plan on its first step and again only when something the
plan was derived from changes (:func:`plan_key`: the group's tensors, their types, shapes,
devices and dtypes, which of them have a gradient, and the settings in
:data:`~torch_mars.optim.settings.PLANNED_SETTINGS`), so a step
does not re-derive them per tensor; ``torch.optim``'s ``_init_group`` re-derives them every step.
The plan holds no state tensors: those are read from ``optimizer.state`` on every step, so a
loaded or edited state is always the one stepped.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from torch_mars.kernels import TRITON_AVAILABLE
from torch_mars.optim import functional
from torch_mars.optim.functional import Implementation, default_foreach
from torch_mars.optim.settings import PLANNED_SETTINGS
from torch_mars.optim.step_math import elementwise_rule

if TYPE_CHECKING:
    from torch_mars.distributed.group_sharding import GroupSharding


def routes_to_mars(param: Tensor, group: dict[str, Any]) -> bool:
    """Whether ``param`` takes the MARS update in ``group``: ``use_mars`` when the group sets it,
    else ``optimize_1d or param.ndim >= 2`` (``param.ndim == 2`` under ``reference_routing``)."""
    if group["use_mars"] is not None:
        return bool(group["use_mars"])
    if group["optimize_1d"]:
        return True
    return param.ndim == 2 if group["reference_routing"] else param.ndim >= 2


def state_buffer_names(param: Tensor, group: dict[str, Any]) -> tuple[str, ...]:
    """The state buffers of ``param`` under ``group``'s settings: ``exp_avg``; ``exp_avg_sq``
    (and ``max_exp_avg_sq`` under AMSGrad) when its update divides by a second moment, which
    the Lion tensors and the Shampoo matrices do not; ``last_grad`` when it takes the MARS rule
    (not under ``one_buffer``); ``prev_param`` in the exact mode."""
    use_mars = routes_to_mars(param, group)
    names = ["exp_avg"]
    takes_adam_rule = not use_mars or elementwise_rule(group["mars_type"], param.ndim) == "adam"
    if takes_adam_rule:
        names.append("exp_avg_sq")
        if group["amsgrad"]:
            names.append("max_exp_avg_sq")
    if use_mars and not group["one_buffer"]:
        names.append("last_grad")
    if not group["is_approx"]:
        names.append("prev_param")
    return tuple(names)


def default_fused(group: dict[str, Any], params: Sequence[Tensor]) -> bool:
    """Whether a group with neither ``fused`` nor ``foreach`` set takes the fused kernels: on
    CUDA when Triton imports, where the Triton kernels run these tensors and settings
    themselves (the fused path, :func:`~torch_mars.optim.functional.fused_path`, is
    ``"triton"``). The others (settings :func:`~torch_mars.optim.settings.unsupported` by
    ``"triton"``, non-contiguous tensors) would go to a compiled per-tensor kernel, which
    compiles on the first step: they stay on foreach unless asked."""
    return (
        TRITON_AVAILABLE
        and bool(params)
        and all(p.is_cuda for p in params)
        and _fused_path(group, params) == "triton"
    )


def step_path(group: dict[str, Any], params: Sequence[Tensor]) -> Implementation:
    """The step path of a group of plain tensors, chosen here and nowhere else, and the one
    whose functions run (:data:`~torch_mars.optim.functional.PATH_KERNELS`): with
    ``fused=True``, the fused kernels that run these tensors and settings
    (:func:`~torch_mars.optim.functional.fused_path`: ``"triton"`` on CUDA, ``"compiled"``
    elsewhere and for non-contiguous tensors or settings Triton does not run); with neither
    flag set, the Triton kernels when every tensor is on CUDA, Triton imports and runs the
    settings (:func:`default_fused`), as ``torch.optim`` picks its fused kernels; else foreach
    or the per-tensor loop (the device default,
    :func:`~torch_mars.optim.functional.default_foreach`).

    A step traced by ``torch.compile`` takes the per-tensor loop: inductor fuses it across
    tensors anyway, and in torch 2.13 the foreach ops fail to compile when their scalars derive
    from a dynamic step count (the generated code references an unbound symbol).
    """
    if torch.compiler.is_compiling():
        return _fused_path(group, params) if group["fused"] else "single_tensor"
    if group["fused"] or (
        group["fused"] is None and group["foreach"] is None and default_fused(group, params)
    ):
        return _fused_path(group, params)
    foreach = group["foreach"]
    if foreach is None:
        foreach = default_foreach(params)
    return "foreach" if foreach else "single_tensor"


def _fused_path(group: dict[str, Any], params: Sequence[Tensor]) -> Implementation:
    return functional.fused_path([*params, *(p.grad for p in params)], group.__getitem__)


def is_dtensor(tensor: Tensor) -> bool:
    """Whether ``tensor`` is a ``DTensor``, without importing the distributed code: a
    ``DTensor`` can only exist once ``torch.distributed.tensor`` has been imported."""
    dtensor_module = sys.modules.get("torch.distributed.tensor")
    return dtensor_module is not None and isinstance(tensor, dtensor_module.DTensor)


def group_sharding_of(params: Sequence[Tensor]) -> GroupSharding | None:
    """None for plain tensors (:func:`is_dtensor`), without importing the distributed code."""
    if not any(is_dtensor(p) for p in params):
        return None
    from torch_mars.distributed.group_sharding import group_sharding

    return group_sharding(params)


def plan_key(group: dict[str, Any]) -> tuple[Hashable, ...]:
    """What a plan of ``group`` is derived from, compared on every step: each tensor's
    identity, type, shape (so ndim), device and dtype, whether it has a gradient, whether it
    and its gradient are contiguous (the Triton kernels' flat indexing needs it), the
    :data:`PLANNED_SETTINGS`, and whether the step is being traced by ``torch.compile``. A
    plan is derived from these alone, so a tensor that reuses a freed one's ``id()`` with
    another shape or type gets a plan of its own."""
    # One comprehension, no call per tensor: this runs on every step.
    tensors = tuple(
        [
            (
                id(p),
                type(p),
                p.shape,
                p.grad is not None,
                p.is_contiguous() and (p.grad is None or p.grad.is_contiguous()),
                p.device,
                p.dtype,
            )
            for p in group["params"]
        ]
    )
    settings = tuple(group[name] for name in PLANNED_SETTINGS)
    return tensors, settings, torch.compiler.is_compiling()


@dataclasses.dataclass(frozen=True)
class GroupStepPlan:
    """One param group's routing, buffers and path, for its tensors that have a gradient.

    Attributes:
        key: the :func:`plan_key` it was built for.
        mars: indices into ``group["params"]`` of the tensors with a gradient that take the MARS
            rule, in order.
        adamw: those that take plain AdamW (the 1-D path), in order.
        buffers: the :func:`state_buffer_names` of each tensor with a gradient, by index.
        path: the step path of the group's plain tensors (:func:`step_path`).
        mars_path: the MARS tensors' path: ``path``, or on ``DTensor``s their sharding's
            (multi-tensor on row shards, the per-tensor loop on any other layout).
        adamw_path: the AdamW tensors' path: ``path``, or on ``DTensor``s the one their
            sharding runs them on (its ``adamw_takes_group_path``).
        sharding: the group's sharding (FSDP2 ``DTensor`` parameters), or None.
    """

    key: tuple[Hashable, ...]
    mars: tuple[int, ...]
    adamw: tuple[int, ...]
    buffers: dict[int, tuple[str, ...]]
    path: Implementation
    mars_path: Implementation
    adamw_path: Implementation
    sharding: GroupSharding | None


def build_plan(group: dict[str, Any], key: tuple[Hashable, ...]) -> GroupStepPlan:
    """The plan of ``group`` now (``key`` = :func:`plan_key` of it)."""
    params = group["params"]
    stepped = [i for i, p in enumerate(params) if p.grad is not None]
    routed = {i: routes_to_mars(params[i], group) for i in stepped}
    path = step_path(group, [params[i] for i in stepped])
    sharding = group_sharding_of(params)
    plan = GroupStepPlan(
        key=key,
        mars=tuple(i for i in stepped if routed[i]),
        adamw=tuple(i for i in stepped if not routed[i]),
        buffers={i: state_buffer_names(params[i], group) for i in stepped},
        path=path,
        mars_path=path if sharding is None else sharding.mars_implementation,
        adamw_path=path if sharding is None or sharding.adamw_takes_group_path else "single_tensor",
        sharding=sharding,
    )
    if group["cuda_graph"] and stepped and (plan.sharding is not None or plan.path != "triton"):
        raise ValueError(
            "cuda_graph=True runs the multi-tensor Triton kernels: it needs plain CUDA "
            "tensors (not FSDP2 shards) and fused=True or None, and a step that "
            "torch.compile does not trace; this group would take the "
            f"{plan.path!r} path{' on shards' if plan.sharding is not None else ''}"
        )
    return plan
