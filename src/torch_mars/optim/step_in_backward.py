"""MARS stepped inside the backward pass: each parameter is updated as soon as its gradient is
complete, and the gradient is freed at once, so the model's gradients are never all held at
the same time (the optimizer-in-backward pattern of torchtune).

One :class:`~torch_mars.optim.mars.MARS` per parameter runs from a
``register_post_accumulate_grad_hook``. The maths is the per-tensor loop's, so the result is
bitwise that of ``MARS(..., foreach=False)`` stepped after a full backward. What it cannot do:
anything that needs every gradient before the step. Gradient accumulation (the hook steps on
every backward), a global gradient-norm clip, and the exact mode (a second gradient on the same
batch, which needs a closure) are refused or impossible; see :class:`StepInBackward`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torch import Tensor

from torch_mars.optim.mars import MARS
from torch_mars.optim.settings import DEFAULTS


class StepInBackward:
    """Update each parameter during ``loss.backward()``, then free its gradient.

    Args:
        params: the parameters: tensors, or ``(name, tensor)`` pairs as
            ``model.named_parameters()`` gives them (each optimizer keeps its name); param-group
            dicts are not supported: give each group its own ``StepInBackward``.
        **mars_kwargs: the arguments of :class:`~torch_mars.optim.mars.MARS` (``lr``,
            ``betas``, ``gamma``, ``mars_type``...), shared by every parameter. ``is_approx``
            must stay True and ``foreach`` False (one tensor per optimizer).

    After ``loss.backward()`` every parameter has been stepped and every ``.grad`` is None; do
    not call ``step()`` or ``zero_grad()``. Do not accumulate gradients over several backward
    passes (each pass steps), and do not clip by the global norm (no step sees all gradients).
    :attr:`param_groups` lists every parameter's group, so a schedule can set ``lr`` on all.

    Example:
        >>> import torch
        >>> from torch_mars import StepInBackward
        >>> model = torch.nn.Linear(4, 2)
        >>> opt = StepInBackward(model.parameters(), lr=1e-2)
        >>> model(torch.randn(3, 4)).pow(2).sum().backward()
        >>> model.weight.grad is None, int(opt.optimizers[0].state[model.weight]["step"])
        (True, 1)
    """

    def __init__(
        self, params: Iterable[Tensor] | Iterable[tuple[str, Tensor]], **mars_kwargs: Any
    ) -> None:
        settings = {**DEFAULTS, **mars_kwargs}
        if settings["is_approx"] is not True:
            raise ValueError(
                "StepInBackward needs is_approx=True: the exact mode evaluates a second gradient "
                "of the same batch through a closure, which a backward hook cannot run"
            )
        if settings["foreach"] or settings["fused"]:
            raise ValueError(
                "StepInBackward steps one tensor at a time: foreach and fused have nothing to "
                "batch (leave them unset)"
            )
        entries = list(params)
        tensors = [entry[1] if isinstance(entry, tuple) else entry for entry in entries]
        if not all(isinstance(p, Tensor) for p in tensors):
            raise ValueError("StepInBackward takes tensors or (name, tensor) pairs")
        chosen = [(entry, p) for entry, p in zip(entries, tensors, strict=True) if p.requires_grad]
        if not chosen:
            raise ValueError("StepInBackward needs at least one tensor that requires grad")
        self.optimizers = [MARS([entry], foreach=False, **mars_kwargs) for entry, _ in chosen]
        self._hooks = [
            p.register_post_accumulate_grad_hook(self._hook_for(opt))
            for (_, p), opt in zip(chosen, self.optimizers, strict=True)
        ]

    @staticmethod
    def _hook_for(optimizer: MARS):
        def step_and_free(param: Tensor) -> None:
            optimizer.step()
            param.grad = None

        return step_and_free

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """Every parameter's param group (one per parameter)."""
        return [group for opt in self.optimizers for group in opt.param_groups]

    def state_dict(self) -> dict[str, Any]:
        """The per-parameter optimizers' state dicts, in parameter order."""
        return {"optimizers": [opt.state_dict() for opt in self.optimizers]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a :meth:`state_dict` of a ``StepInBackward`` over the same parameters."""
        saved = state_dict["optimizers"]
        if len(saved) != len(self.optimizers):
            raise ValueError(
                f"the state dict holds {len(saved)} parameters' optimizers, this one has "
                f"{len(self.optimizers)}"
            )
        for opt, entry in zip(self.optimizers, saved, strict=True):
            opt.load_state_dict(entry)

    def remove(self) -> None:
        """Detach the hooks: later backward passes leave the gradients in ``.grad``."""
        for hook in self._hooks:
            hook.remove()
        self._hooks = []


__all__ = ["StepInBackward"]
