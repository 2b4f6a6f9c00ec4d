"""Functional MARS and AdamW steps: one entry point per rule, the implementation chosen by one flag.

``"single_tensor"`` runs the per-tensor reference loop (:mod:`~torch_mars.optim.single_tensor`,
where the maths reads as the formulas), ``"foreach"`` the multi-tensor kernels
(:mod:`~torch_mars.optim.multi_tensor`), ``"fused"`` the fused kernels of
:mod:`torch_mars.kernels`: Triton on CUDA, one ``torch.compile``d kernel per tensor elsewhere
(``"triton"`` and ``"compiled"`` name them explicitly). The multi-tensor and fused paths are
element-wise; for ``mars-shampoo`` the Newton-Schulz step of the matrices follows them here, in
one place (:func:`~torch_mars.optim.newton_schulz.apply_shampoo_directions`). All update their
tensor arguments in place and agree to float round-off.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple

import torch
from torch import Tensor

from torch_mars.optim.multi_tensor import (
    adamw_step_foreach,
    mars_elementwise_foreach,
    one_buffer_momenta_foreach,
)
from torch_mars.optim.newton_schulz import apply_shampoo_directions
from torch_mars.optim.single_tensor import adamw_step_single_tensor, mars_step_single_tensor
from torch_mars.optim.step_math import is_shampoo_matrix
from torch_mars.optim.step_types import (
    AdamWHyperparams,
    MarsHyperparams,
    StepTensors,
    WholeTensorOps,
)

Implementation = Literal["single_tensor", "foreach", "fused", "compiled", "triton"]
IMPLEMENTATIONS: tuple[str, ...] = ("single_tensor", "foreach", "fused", "compiled", "triton")

# Device types with native multi-tensor kernels; elsewhere ``_foreach_*`` falls back to a loop.
_FOREACH_DEVICE_TYPES = frozenset({"cuda", "xpu", "mtia", "privateuseone"})
# On CPU the multi-tensor path is the faster one up to this many elements in all (measured in
# docs/benchmarks.md: faster on tiny, tiny-w64 and mini, 34K-7.2M elements, where a step's
# cost is the ops it dispatches; twice slower on GPT-2 small, 124M, where its temporaries'
# memory traffic is).
CPU_FOREACH_MAX_ELEMENTS = 1 << 24


def default_foreach(tensors: Sequence[Tensor]) -> bool:
    """Whether ``foreach=None`` should pick the multi-tensor path for ``tensors``.

    True when every tensor lives on a device type with native ``_foreach`` kernels (CUDA, XPU,
    ...), the rule of ``torch.optim``; on CPU, where those kernels fall back to a per-tensor
    loop with more temporaries, only while the tensors hold at most
    :data:`CPU_FOREACH_MAX_ELEMENTS` elements in all (fewer ops dispatched wins there).
    """
    if not tensors:
        return False
    if all(t.device.type in _FOREACH_DEVICE_TYPES for t in tensors):
        return True
    return all(t.device.type == "cpu" for t in tensors) and (
        sum(t.numel() for t in tensors) <= CPU_FOREACH_MAX_ELEMENTS
    )


def fused_backend(tensors: Sequence[Tensor]) -> Literal["triton", "compiled"]:
    """The fused kernels of ``tensors``' device: Triton when they are all on CUDA, else
    compiled."""
    return "triton" if tensors and all(t.is_cuda for t in tensors) else "compiled"


def fused_path(
    tensors: Sequence[Tensor | None], value_of: Callable[[str], Any]
) -> Literal["triton", "compiled"]:
    """The fused path that runs ``tensors`` (the parameters with their gradients or state)
    under the settings ``value_of(name)`` gives: the device's (:func:`fused_backend`), except
    where the Triton kernels refuse them
    (:func:`~torch_mars.kernels.triton_step.triton_refusal`: strided tensors, settings they do
    not run), which take the compiled per-tensor kernel (inductor's own Triton on CUDA)."""
    present = [t for t in tensors if t is not None]
    backend = fused_backend(present)
    if backend == "triton":
        from torch_mars.kernels.triton_step import triton_refusal

        if triton_refusal(present, value_of) is not None:
            return "compiled"
    return backend


def _upcast_state(tensors: StepTensors) -> tuple[StepTensors, list[tuple[Tensor, Tensor]]]:
    """Working copies, in the parameter dtype, of state stored in a narrower dtype; returns the
    (stored, working) pairs to write back after the step."""
    pairs: list[tuple[Tensor, Tensor]] = []
    # Every state buffer of a tensor shares one dtype, so exp_avgs tell whether any work is due.
    if all(m.dtype == p.dtype for m, p in zip(tensors.exp_avgs, tensors.params, strict=True)):
        return tensors, pairs

    def working(stored: list[Tensor | None]) -> list[Tensor | None]:
        result: list[Tensor | None] = []
        for value, param in zip(stored, tensors.params, strict=False):
            if value is None or value.dtype == param.dtype:
                result.append(value)
            else:
                copy = value.to(param.dtype)
                pairs.append((value, copy))
                result.append(copy)
        return result

    upcast = StepTensors(
        tensors.params,
        tensors.grads,
        working(tensors.exp_avgs),
        working(tensors.exp_avg_sqs),
        working(tensors.max_exp_avg_sqs),
        tensors.steps,
        working(tensors.last_grads),
    )
    return upcast, pairs


def _write_back(pairs: list[tuple[Tensor, Tensor]]) -> None:
    for stored, copy in pairs:
        stored.copy_(copy)


def _resolve(
    implementation: Implementation, tensors: StepTensors, hp: MarsHyperparams | AdamWHyperparams
) -> str:
    """The path of a call: ``implementation``, with ``"fused"`` resolved by :func:`fused_path`
    over every buffer of ``tensors`` (a setting ``hp`` does not hold is at its default)."""
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")
    if implementation == "fused":
        return fused_path(tensors.buffers(), hp.setting)
    return implementation


def mars_step(
    tensors: StepTensors,
    hp: MarsHyperparams,
    *,
    store_last_grad: bool,
    implementation: Implementation = "single_tensor",
    inv_grad_scale: Tensor | None = None,
    whole: WholeTensorOps | None = None,
) -> list[Tensor] | None:
    r"""One MARS step on tensors that all follow the MARS rule (in place).

    For each tensor :math:`p` with gradient :math:`g` (negated if ``hp.maximize``), previous-
    gradient buffer :math:`\tilde g` (``last_grads``) and step count :math:`t` (``steps``,
    already incremented, so 1 on the first step):

    .. math::
        c &= g + \gamma \tfrac{\beta_1}{1-\beta_1} (g - \tilde g), \qquad
        c \leftarrow c / \max(1, \lVert c \rVert_2) \\
        m &\leftarrow \beta_1 m + (1-\beta_1) c

    then ``mars-adamw`` (and ``mars-shampoo`` on tensors with ``ndim < 2``):
    :math:`v \leftarrow \beta_2 v + (1-\beta_2) c^2`,
    :math:`p \leftarrow p - lr\,(wd\,p + \hat m / (\sqrt{\hat v} + \epsilon))`;
    ``mars-lion``: :math:`p \leftarrow p - lr\,(wd\,p + \mathrm{sign}(m))`;
    ``mars-shampoo`` on ``ndim >= 2``: with :math:`M` = ``m.reshape(shape[0], -1)`` of shape
    ``(rows, cols)``, :math:`p \leftarrow p - lr\,(NS(M) \sqrt{\max(1, rows/cols)} + wd\,p)`.

    Args:
        tensors: the parameters, gradients, ``last_grads`` and state, one entry per parameter.
            State may be stored in a narrower dtype than the parameter (``state_dtype``); the
            maths runs in the parameter's dtype (float32 or wider in the fused kernels).
        hp: the hyperparameters.
        store_last_grad: copy ``g`` into ``last_grads`` after use (approximate mode).
        implementation: ``"single_tensor"``, ``"foreach"``, ``"fused"`` (``"triton"`` on CUDA,
            ``"compiled"`` elsewhere), or one of those two by name.
        inv_grad_scale: ``1 / scale`` of a GradScaler, divided out of ``g`` by the fused kernels
            (the other paths expect unscaled gradients).
        whole: for local shards of sharded tensors (FSDP2), the collectives that give the
            whole-tensor norms and Newton-Schulz directions (see
            :class:`torch_mars.distributed.ShardedMeshOps`); only with ``"foreach"``.

    Returns:
        With ``hp.skip_nonfinite``, one 0-d gate per tensor: 1 if it was updated, 0 if its
        ``||c||`` was not finite and its parameter and state were left as they were (decided on
        the device; reading a gate on the host synchronises). Else None.

    >>> import torch
    >>> from torch_mars.optim import MarsHyperparams, StepTensors, mars_step
    >>> p, g = torch.zeros(2, 2), torch.full((2, 2), 4.0)
    >>> tensors = StepTensors([p], [g], [torch.zeros(2, 2)], [torch.zeros(2, 2)],
    ...                       steps=[1], last_grads=[g.clone()])
    >>> hp = MarsHyperparams(lr=0.1, beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.0)
    >>> mars_step(tensors, hp, store_last_grad=True)  # each tensor's gate: 1, it stepped
    [tensor(1.)]
    >>> p  # ||c|| = 8 is clipped to 1; the first Adam step moves each entry by -lr
    tensor([[-0.1000, -0.1000],
            [-0.1000, -0.1000]])
    """
    path = _resolve(implementation, tensors, hp)
    kernels = PATH_KERNELS[path]
    if whole is not None and not kernels.whole_tensor_ops:
        raise ValueError(
            f"whole-tensor ops on local shards need implementation='foreach', got {path!r}"
        )
    _check_grad_scale(inv_grad_scale, kernels, path)
    if kernels.mars_step is not None:
        return kernels.mars_step(tensors, hp, store_last_grad)
    working, pairs, gates, momenta = kernels.elementwise_pass(
        tensors, hp, store_last_grad, inv_grad_scale, whole
    )
    ndims = {p.ndim for p in working.params}
    matrix_ndims = {ndim for ndim in ndims if is_shampoo_matrix(hp.mars_type, ndim)}
    matrices = [i for i, p in enumerate(working.params) if p.ndim in matrix_ndims]
    if matrices:
        matrix_gates = None if gates is None else [gates[i] for i in matrices]
        selected = dataclasses.replace(
            working.select(matrices), exp_avgs=[momenta[i] for i in matrices]
        )
        apply_shampoo_directions(selected, hp, whole, matrix_gates)
    _write_back(pairs)
    return gates


class _PassResult(NamedTuple):
    """What an element-wise pass of the multi-tensor or fused paths returns."""

    stepped: StepTensors  # working copies where state is stored narrower
    write_back: list[tuple[Tensor, Tensor]]  # (stored, working) pairs
    gates: list[Tensor] | None
    momenta: list[Tensor]  # each tensor's m_t, which Newton-Schulz orthogonalises


def _single_tensor_mars_step(
    tensors: StepTensors, hp: MarsHyperparams, store_last_grad: bool
) -> list[Tensor] | None:
    """The whole MARS step, tensor by tensor, in the parameter's dtype."""
    working, pairs = _upcast_state(tensors)
    gates = mars_step_single_tensor(working, hp, store_last_grad)
    _write_back(pairs)
    return gates


def _foreach_pass(
    tensors: StepTensors,
    hp: MarsHyperparams,
    store_last_grad: bool,
    inv_grad_scale: Tensor | None,
    whole: WholeTensorOps | None,
) -> _PassResult:
    """The element-wise MARS step with the multi-tensor kernels. With ``m`` and ``g_tilde``
    buffers ``m_t`` is ``exp_avg``; under ``one_buffer`` (one buffer ``u``, no ``g_tilde``;
    :func:`~torch_mars.optim.step_math.one_buffer_coefficients`) it is a temporary rebuilt
    from ``u`` and ``g``."""
    working, pairs = _upcast_state(tensors)
    if hp.one_buffer:
        momenta, gates = one_buffer_momenta_foreach(working, hp, whole)
        return _PassResult(working, pairs, gates, momenta)
    gates = mars_elementwise_foreach(working, hp, store_last_grad, whole)
    return _PassResult(working, pairs, gates, working.exp_avgs)


def _fused_pass(kernel: Callable[..., list[Tensor] | None]) -> Callable[..., _PassResult]:
    """The element-wise MARS step with the fused ``kernel``. Under ``one_buffer`` the kernel
    writes each Newton-Schulz matrix's ``m_t`` into the ``last_grads`` slot, which has no
    buffer of its own there."""

    def elementwise_pass(
        tensors: StepTensors,
        hp: MarsHyperparams,
        store_last_grad: bool,
        inv_grad_scale: Tensor | None,
        whole: WholeTensorOps | None,
    ) -> _PassResult:
        if not hp.one_buffer:
            gates = kernel(tensors, hp, store_last_grad, inv_grad_scale)
            return _PassResult(tensors, [], gates, tensors.exp_avgs)
        momenta = [
            torch.empty_like(m) if is_shampoo_matrix(hp.mars_type, p.ndim) else None
            for p, m in zip(tensors.params, tensors.exp_avgs, strict=True)
        ]
        with_momenta = dataclasses.replace(tensors, last_grads=momenta)
        gates = kernel(with_momenta, hp, store_last_grad, inv_grad_scale)
        return _PassResult(with_momenta, [], gates, momenta)  # type: ignore[arg-type]

    return elementwise_pass


def _upcast_adamw_step(
    step: Callable[[StepTensors, AdamWHyperparams], None],
    tensors: StepTensors,
    hp: AdamWHyperparams,
) -> None:
    """``step`` in the parameter's dtype on state stored narrower."""
    upcast, pairs = _upcast_state(tensors)
    step(upcast, hp)
    _write_back(pairs)


def _single_tensor_adamw_step(
    tensors: StepTensors, hp: AdamWHyperparams, inv_grad_scale: Tensor | None
) -> None:
    _upcast_adamw_step(adamw_step_single_tensor, tensors, hp)


def _foreach_adamw_step(
    tensors: StepTensors, hp: AdamWHyperparams, inv_grad_scale: Tensor | None
) -> None:
    _upcast_adamw_step(adamw_step_foreach, tensors, hp)


def _kernel(module: str, name: str) -> Callable[..., Any]:
    """``torch_mars.kernels.<module>.<name>``, imported on its first call (Triton and
    torch.compile load only when a fused path runs), then called directly."""
    resolved: list[Callable[..., Any]] = []

    def call(*args: Any) -> Any:
        if not resolved:
            resolved.append(getattr(importlib.import_module(f"torch_mars.kernels.{module}"), name))
        return resolved[0](*args)

    return call


@dataclasses.dataclass(frozen=True)
class PathKernels:
    """The functions one step path runs.

    Attributes:
        mars_step: the whole MARS step tensor by tensor (the loop), or None where the path runs
            an element-wise pass and Newton-Schulz follows in :func:`mars_step`.
        elementwise_pass: that pass (two buffers, or one under ``one_buffer``).
        adamw_step: the AdamW step of the 1-D path.
        unscales_grads: takes a GradScaler's ``inv_grad_scale`` (the fused kernels).
        whole_tensor_ops: runs on local shards with whole-tensor collectives (FSDP2).
    """

    mars_step: Callable[..., list[Tensor] | None] | None
    elementwise_pass: Callable[..., _PassResult] | None
    adamw_step: Callable[..., None]
    unscales_grads: bool = False
    whole_tensor_ops: bool = False


def _fused_kernels(module: str, mars: str, adamw: str) -> PathKernels:
    return PathKernels(
        mars_step=None,
        elementwise_pass=_fused_pass(_kernel(module, mars)),
        adamw_step=_kernel(module, adamw),
        unscales_grads=True,
    )


# Each path's functions: the one table every step dispatches through (``"fused"`` is resolved
# to "triton" or "compiled" first, by :func:`fused_path`).
PATH_KERNELS: dict[str, PathKernels] = {
    "single_tensor": PathKernels(
        mars_step=_single_tensor_mars_step,
        elementwise_pass=None,
        adamw_step=_single_tensor_adamw_step,
    ),
    "foreach": PathKernels(
        mars_step=None,
        elementwise_pass=_foreach_pass,
        adamw_step=_foreach_adamw_step,
        whole_tensor_ops=True,
    ),
    "triton": _fused_kernels("triton_step", "mars_elementwise_triton", "adamw_step_triton"),
    "compiled": _fused_kernels("compiled_step", "mars_elementwise_compiled", "adamw_step_compiled"),
}


def adamw_step(
    tensors: StepTensors,
    hp: AdamWHyperparams,
    *,
    implementation: Implementation = "single_tensor",
    inv_grad_scale: Tensor | None = None,
) -> None:
    r"""One AdamW step (decoupled weight decay), in place; MARS uses it for 1-D tensors.

    :math:`m \leftarrow \beta_1 m + (1-\beta_1) g`,
    :math:`v \leftarrow \beta_2 v + (1-\beta_2) g^2`,
    :math:`p \leftarrow p (1 - lr\,wd) - lr\,\hat m / (\sqrt{\hat v} + \epsilon)` with
    :math:`\hat m = m/(1-\beta_1^t)`, :math:`\hat v = v/(1-\beta_2^t)`,
    with :math:`v` replaced by its running maximum under AMSGrad. This is exactly the update of
    ``torch.optim.AdamW``. Arguments as in :func:`mars_step` (``tensors.last_grads`` unused).
    """
    path = _resolve(implementation, tensors, hp)
    kernels = PATH_KERNELS[path]
    _check_grad_scale(inv_grad_scale, kernels, path)
    kernels.adamw_step(tensors, hp, inv_grad_scale)


def _check_grad_scale(inv_grad_scale: Tensor | None, kernels: PathKernels, path: str) -> None:
    if inv_grad_scale is not None and not kernels.unscales_grads:
        raise ValueError(f"inv_grad_scale is only supported by the fused kernels, not {path!r}")
