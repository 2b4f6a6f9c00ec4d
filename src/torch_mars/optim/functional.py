"""Functional MARS and AdamW steps: one entry point per rule, the implementation chosen by one flag.

``foreach=False`` runs the per-tensor reference loop (:mod:`~torch_mars.optim.single_tensor`),
``foreach=True`` the multi-tensor kernels (:mod:`~torch_mars.optim.multi_tensor`). Both update
their tensor arguments in place and agree to float round-off.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from torch_mars.optim.hyperparams import AdamWHyperparams, MarsHyperparams
from torch_mars.optim.multi_tensor import adamw_step_foreach, mars_step_foreach
from torch_mars.optim.single_tensor import adamw_step_single_tensor, mars_step_single_tensor

# Device types with native multi-tensor kernels; elsewhere ``_foreach_*`` falls back to a loop.
_FOREACH_DEVICE_TYPES = frozenset({"cuda", "xpu", "mtia", "privateuseone"})


def default_foreach(tensors: Sequence[Tensor]) -> bool:
    """Whether ``foreach=None`` should pick the multi-tensor path for ``tensors``.

    True when every tensor lives on a device type with native ``_foreach`` kernels (CUDA, XPU,
    ...), the rule of ``torch.optim``. On CPU those kernels fall back to a per-tensor loop and
    allocate more temporaries; ``docs/benchmarks.md`` has the measured step times of both.
    """
    return bool(tensors) and all(t.device.type in _FOREACH_DEVICE_TYPES for t in tensors)


def mars_step(
    params: list[Tensor],
    grads: list[Tensor],
    last_grads: list[Tensor],
    exp_avgs: list[Tensor],
    exp_avg_sqs: list[Tensor],
    max_exp_avg_sqs: list[Tensor],
    steps: list[int],
    hp: MarsHyperparams,
    *,
    store_last_grad: bool,
    foreach: bool,
) -> None:
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
        params, grads, last_grads, exp_avgs, exp_avg_sqs: same-shape tensors, one per parameter.
        max_exp_avg_sqs: the AMSGrad maxima, one per parameter; ignored unless ``hp.amsgrad``.
        steps: the per-tensor step count ``t`` used for bias correction.
        hp: the hyperparameters.
        store_last_grad: copy ``g`` into ``last_grads`` after use (approximate mode).
        foreach: use the multi-tensor kernels instead of the per-tensor loop.
    """
    step_impl = mars_step_foreach if foreach else mars_step_single_tensor
    step_impl(
        params,
        grads,
        last_grads,
        exp_avgs,
        exp_avg_sqs,
        max_exp_avg_sqs,
        steps,
        hp,
        store_last_grad,
    )


def adamw_step(
    params: list[Tensor],
    grads: list[Tensor],
    exp_avgs: list[Tensor],
    exp_avg_sqs: list[Tensor],
    max_exp_avg_sqs: list[Tensor],
    steps: list[int],
    hp: AdamWHyperparams,
    *,
    foreach: bool,
) -> None:
    r"""One AdamW step (decoupled weight decay), in place; MARS uses it for 1-D tensors.

    :math:`m \leftarrow \beta_1 m + (1-\beta_1) g`,
    :math:`v \leftarrow \beta_2 v + (1-\beta_2) g^2`,
    :math:`p \leftarrow p (1 - lr\,wd) - lr\,\hat m / (\sqrt{\hat v} + \epsilon)` with
    :math:`\hat m = m/(1-\beta_1^t)`, :math:`\hat v = v/(1-\beta_2^t)`,
    with :math:`v` replaced by its running maximum under AMSGrad. This is exactly the update of
    ``torch.optim.AdamW``.
    """
    step_impl = adamw_step_foreach if foreach else adamw_step_single_tensor
    step_impl(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, hp)
