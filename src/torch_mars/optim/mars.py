"""The :class:`MARS` optimizer: validates hyperparameters, owns and creates per-tensor state,
routes each tensor to the MARS rule or to plain AdamW, and runs the exact mode's second gradient
evaluation. A step on plain tensors goes ``MARS.step -> MARS._step_group ->
functional.mars_step -> single_tensor.mars_step_single_tensor`` (or the foreach/fused path the
flags pick), where the maths reads as the formulas; ``docs/algorithm.md`` traces it. Groups of
``DTensor`` parameters (FSDP2) take the sharded path of :mod:`torch_mars.distributed`, chosen
once per group."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from torch_mars.kernels import require_triton
from torch_mars.optim.functional import adamw_step, mars_step
from torch_mars.optim.settings import (
    DEFAULTS,
    FIRST_RELEASE_SETTINGS,
    SETTINGS,
    MarsType,
    Scalar,
    SecondMoment,
    validate_group,
)
from torch_mars.optim.step_math import elementwise_rule
from torch_mars.optim.step_plan import (
    GroupStepPlan,
    build_plan,
    group_sharding_of,
    plan_key,
    routes_to_mars,
    state_buffer_names,
    step_path,
)
from torch_mars.optim.step_types import (
    MarsHyperparams,
    StepTensors,
    adamw_1d_hyperparams,
    group_indices,
    mars_hyperparams,
)


class MARS(Optimizer):
    r"""MARS: variance-reduced AdamW, Lion and Shampoo (Yuan et al., ICML 2025, arXiv 2411.10438).

    For each tensor :math:`p` with gradient :math:`g_t` at its step :math:`t`:

    .. math::
        c_t &= g_t + \gamma \frac{\beta_1}{1-\beta_1}\,(g_t - \tilde g_t), \qquad
        c_t \leftarrow c_t / \max(1, \lVert c_t \rVert_2) \\
        m_t &= \beta_1 m_{t-1} + (1-\beta_1)\, c_t

    where :math:`\tilde g_t` is the tensor's previous gradient (``is_approx=True``, one backward
    pass per step) or :math:`\nabla f(x_{t-1}, \xi_t)`, the gradient at the previous parameters on
    the current batch (``is_approx=False``, two evaluations of ``closure`` per step). On a tensor's
    first step :math:`\tilde g = g`. Then ``mars-adamw`` takes an AdamW step with :math:`m_t` and
    :math:`v_t = \beta_2 v_{t-1} + (1-\beta_2) c_t^2`; ``mars-lion`` steps by
    :math:`\mathrm{sign}(m_t)`; ``mars-shampoo`` by the Newton-Schulz orthogonalisation of
    :math:`m_t` (viewed as ``(shape[0], -1)``). All three decay weights decoupled:
    :math:`p \leftarrow p - lr\,(wd\,p + u)`.

    Tensors with ``ndim < 2`` (biases, norm gains) take plain AdamW on :math:`g` with
    ``betas_1d``, ``weight_decay_1d`` and learning rate ``lr * lr_1d / lr0`` (``lr0``: the
    group's ``lr`` when it was added), unless ``optimize_1d=True``; a param group may force the
    choice with ``use_mars=True`` or ``False``. Two rules keep framework param groups right:
    ``lr_1d`` defaults to the group's ``lr``, and a group that sets ``weight_decay`` but not
    ``weight_decay_1d`` decays its 1-D tensors by its ``weight_decay`` (so the "no decay" groups
    of Hugging Face's Trainer and timm decay nothing). :meth:`learning_rate` gives the rate a
    tensor takes now.

    Args:
        params: tensors, (name, tensor) pairs as ``model.named_parameters()`` gives them (the
            names are kept as the group's ``param_names``), or param-group dicts of either;
            every argument below may be set per group.
        lr: learning rate of the MARS-routed tensors, >= 0; a float or a one-element tensor
            (write new values into the tensor to schedule it without recompiling a compiled
            ``step``).
        betas: ``(beta1, beta2)`` of the MARS rule, each in [0, 1) (floats or tensors).
        eps: denominator term of the Adam rule, >= 0.
        weight_decay: decoupled weight decay of MARS-routed tensors, >= 0.
        amsgrad: use the running maximum of ``v`` (both Adam rules).
        gamma: variance-reduction strength, >= 0 (float or one-element tensor); 0 gives AdamW /
            Lion / Muon-style Shampoo.
        is_approx: approximate mode (previous step's gradient) or exact mode (needs a closure).
        mars_type: ``"mars-adamw"``, ``"mars-lion"``, ``"mars-shampoo"`` or ``"mars-m"``
            (MARS-M, Liu, Yuan and Gu, arXiv 2510.21800: the Shampoo rule's Newton-Schulz step
            scaled by ``0.2 sqrt(max(rows, cols))`` as in Moonlight, so that its lr and weight
            decay are AdamW's; docs/algorithm.md gives the authors' settings).
        optimize_1d: route ``ndim < 2`` tensors to MARS too.
        reference_routing: route only ``ndim == 2`` tensors to MARS, as the authors' code does,
            so that 4-D conv weights take plain AdamW; for comparisons with their vision
            results (the default ``ndim >= 2`` treats conv weights as matrices).
        lr_1d: learning rate of the AdamW-routed tensors at ``lr == lr0``, >= 0; None (the
            default): the group's ``lr``.
        betas_1d: ``(beta1, beta2)`` of the AdamW-routed tensors.
        weight_decay_1d: weight decay of the AdamW-routed tensors, >= 0 (a group that sets
            ``weight_decay`` and not this takes its ``weight_decay``).
        maximize: maximise the objective instead of minimising it.
        ns_steps: Newton-Schulz iterations of ``mars-shampoo`` and ``mars-m``, >= 1.
        ns_dtype: the dtype Newton-Schulz runs in, ``torch.bfloat16`` or ``torch.float32``;
            None (the default): bf16 where the device multiplies it in hardware (CUDA from
            compute capability 8.0, CPUs with AMX or AVX-512 BF16), float32 elsewhere, and
            float64 for float64 parameters.
        ns_iteration: ``"quintic"`` (the default: Muon's iteration on ``X``), ``"gram"``
            (the same polynomial iterated on the smaller ``X X^T``, restarted every three
            steps: fewer FLOPs for matrices much wider than tall) or ``"polar-express"``
            (Muon's step with each iteration's minimax coefficients); docs/algorithm.md.
        ns_products: ``"dense"`` (the default: torch's matmuls) or ``"triangle"`` (CUDA
            tensors, Triton: the Gram matrix and the polynomial's square computed one triangle
            of tiles at a time and mirrored, about 0.7x the FLOPs;
            :mod:`torch_mars.kernels.triton_symmetric`).
        transposed_matrices: the group's 2-D weights are stored as ``(in, out)``, as
            transformers' ``Conv1D`` stores them (:func:`mars_param_groups` sets it for those);
            ``mars-shampoo``'s ``sqrt(max(1, rows/cols))`` then takes rows from ``shape[1]``.
        foreach: multi-tensor kernels (True), the per-tensor loop (False), or the default for the
            device (None: multi-tensor on CUDA-like devices, the loop on CPU). FSDP2 parameters
            (``DTensor`` shards over a 1-D mesh) always take the multi-tensor kernels on their
            local shards, with one ``all_reduce`` per step for the norms of ``c`` and, for
            ``mars-shampoo``, Newton-Schulz of whole matrices on owner ranks (two
            ``all_to_all``); see ``docs/distributed.md``.
        fused: the fused kernels (True): multi-tensor Triton kernels on CUDA (needs the
            ``triton`` extra), one ``torch.compile``d kernel per tensor on CPU. None (the
            default) with ``foreach`` unset takes the Triton kernels when every tensor is on
            CUDA and Triton imports (not for ``cautious`` or ``second_moment="gradient"``), as
            torch.optim does where it has fused kernels; docs/algorithm.md tabulates the default
            paths.
            They also take a GradScaler's scale inside the kernel. Exclusive with
            ``foreach=True``. On FSDP2
            parameters only the 1-D AdamW tensors take them (the MARS tensors take the sharded
            multi-tensor path).
        state_dtype: dtype of ``exp_avg``, ``exp_avg_sq``, ``max_exp_avg_sq`` and ``last_grad``:
            None (the parameter's dtype), ``torch.float32`` or ``torch.bfloat16`` (half the
            state memory; the step still computes in float32). The maths runs in the
            parameter's dtype: float32 state of bf16 parameters is rounded to bf16 for each
            step and stored back, so it steps bitwise like bf16 state and buys nothing (keep
            float32 parameters, e.g. under autocast, for float32 maths).
        skip_nonfinite: a MARS-routed tensor whose ``||c||`` is NaN or infinite keeps its
            parameter and buffers for that step (``last_grad`` too), as if the step had been
            skipped for it; the others step as usual. Decided on the device by every path, with
            no host sync; ``state[p]["nonfinite_skips"]`` counts the skips of ``p`` and
            :meth:`nonfinite_skips` their total. Its step count still advances. False: a
            non-finite ``c`` flows into the update (one NaN entry spreads through the norm to
            the whole tensor). The 1-D AdamW tensors are never masked, as in
            ``torch.optim.AdamW``.
        clip: scale ``c`` to unit norm when ``||c||_2 > 1``, per tensor (the paper's clip);
            False leaves ``c`` unclipped. Without the clip and the skip, no path computes
            ``||c||``: the fused kernels then make one pass instead of two.
        one_buffer: with ``is_approx=True``, ``clip=False`` and a momentum-only rule
            (``mars-lion``, ``mars-shampoo``, ``mars-m``; every MARS-routed tensor must take
            it), keep one buffer per tensor and no ``last_grad``, as Muon does: the same
            trajectory to round-off, a third less state. ``exp_avg`` then holds the buffer
            ``u`` of ``m_t = gamma g_t + beta1 u_t``. Every path runs it (on CUDA, ``fused=True``
            takes the compiled per-tensor kernel for it). The skip tests ``||g||``.
        cautious: C-AdamW's mask (Liang et al., arXiv 2411.16085) on every MARS rule: the
            entries of the update (``m_hat / (sqrt(v_hat) + eps)``, ``sign(m)`` or
            ``NS(m)``) whose sign differs from the gradient ``g``'s are dropped and the rest
            divided by the kept fraction of the whole tensor. The mask compares with ``g``, not
            ``c``: ``g`` is the fresh observation C-AdamW defines it with, and it is still at
            hand after Newton-Schulz, where ``c`` is gone. The 1-D AdamW tensors are not
            masked. Under ``fused=True`` on CUDA the MARS tensors take the compiled per-tensor
            kernel instead of the multi-tensor Triton kernels.
        second_moment: what ``v`` averages the square of on the MARS tensors that take the
            Adam rule: ``"corrected"`` (``c``, after the clip; the paper's and the authors'
            code's) or ``"gradient"`` (``g``, as AdamW's ``v``; ``m`` still averages ``c``).
            An ablation: with ``clip=False`` and ``gamma = 1 - beta1``, ``"gradient"`` gives
            MARS-AdamW's matrices NAdamW's moments (up to a term decaying as ``beta1^t`` and
            the bias corrections), so it asks what the second moment of ``c`` adds. Not
            ``mars-lion`` (no ``v``); under ``fused=True`` on CUDA it takes the compiled
            per-tensor kernel, as ``cautious`` does.
        cuda_graph: make ``step()`` safe to capture in a CUDA graph (``torch.cuda.graph``) and
            replay: step counts are 0-d float32 tensors on the device, and the Triton kernels
            derive the bias corrections and the first step's ``g_tilde = g`` there, so a step
            copies nothing from the host and reads nothing back. It runs the Triton kernels
            (CUDA tensors, ``fused`` True or None) in the approximate mode, without
            ``one_buffer`` or ``cautious``, and not on FSDP2 shards; a GradScaler's
            ``found_inf`` is still read on the host, so use bf16 autocast without a scaler
            when capturing. A float ``lr`` is recorded
            into a captured graph as it was: schedule it through a one-element tensor on the
            device (``lr=torch.tensor(3e-3, device="cuda")``, written in place). Capture after
            a few eager steps on a side stream, as ``torch.cuda.graph`` asks, so that the state
            exists and the kernels are compiled. (torch.optim calls this ``capturable``; that
            key is not used here because torch.compile sets a group's ``capturable`` to True
            when it traces an optimizer, with torch.optim's meaning.)

    State per tensor: ``step`` (int; a 0-d float32 device tensor under ``cuda_graph``),
    ``exp_avg``, ``exp_avg_sq`` (tensors on an Adam rule: not
    the Lion tensors or the Shampoo matrices), ``max_exp_avg_sq`` (AMSGrad),
    ``last_grad`` (MARS-routed tensors: a copy of the previous gradient, never an alias of
    ``p.grad``) and ``prev_param`` (exact mode: the parameters of the previous step), in
    ``state_dtype`` (``prev_param`` in the parameter's dtype); ``nonfinite_skips`` (MARS-routed
    tensors under ``skip_nonfinite``: a 0-d int64 tensor on the parameter's device).

    Example:
        >>> import torch
        >>> from torch_mars import MARS
        >>> model = torch.nn.Linear(4, 1)
        >>> opt = MARS(model.parameters(), lr=1e-2)
        >>> loss = model(torch.randn(8, 4)).pow(2).mean()
        >>> loss.backward()
        >>> opt.step()
        >>> sorted(opt.state[model.weight])
        ['exp_avg', 'exp_avg_sq', 'last_grad', 'nonfinite_skips', 'step']
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[tuple[str, Tensor]] | Iterable[dict[str, Any]],
        lr: Scalar = DEFAULTS["lr"],
        betas: tuple[Scalar, Scalar] = DEFAULTS["betas"],
        eps: float = DEFAULTS["eps"],
        weight_decay: float = DEFAULTS["weight_decay"],
        amsgrad: bool = DEFAULTS["amsgrad"],
        gamma: Scalar = DEFAULTS["gamma"],
        is_approx: bool = DEFAULTS["is_approx"],
        mars_type: MarsType = DEFAULTS["mars_type"],
        optimize_1d: bool = DEFAULTS["optimize_1d"],
        lr_1d: float | None = DEFAULTS["lr_1d"],
        betas_1d: tuple[float, float] = DEFAULTS["betas_1d"],
        weight_decay_1d: float = DEFAULTS["weight_decay_1d"],
        *,
        maximize: bool = DEFAULTS["maximize"],
        ns_steps: int = DEFAULTS["ns_steps"],
        ns_dtype: torch.dtype | None = DEFAULTS["ns_dtype"],
        ns_iteration: str = DEFAULTS["ns_iteration"],
        ns_products: str = DEFAULTS["ns_products"],
        foreach: bool | None = DEFAULTS["foreach"],
        fused: bool | None = DEFAULTS["fused"],
        state_dtype: torch.dtype | None = DEFAULTS["state_dtype"],
        reference_routing: bool = DEFAULTS["reference_routing"],
        transposed_matrices: bool = DEFAULTS["transposed_matrices"],
        skip_nonfinite: bool = DEFAULTS["skip_nonfinite"],
        clip: bool = DEFAULTS["clip"],
        one_buffer: bool = DEFAULTS["one_buffer"],
        cautious: bool = DEFAULTS["cautious"],
        second_moment: SecondMoment = DEFAULTS["second_moment"],
        cuda_graph: bool = DEFAULTS["cuda_graph"],
    ) -> None:
        given = locals()
        # use_mars is a per-group setting only (it routes a group's tensors explicitly).
        defaults: dict[str, Any] = {s.name: given.get(s.name, s.default) for s in SETTINGS}
        validate_group(defaults)
        if isinstance(params, set | frozenset):
            raise TypeError(
                "params must be an ordered collection (a list, model.parameters()): a set's "
                "order changes between runs, and the state dict is matched to it by order"
            )
        super().__init__(params, defaults)
        if any(g["fused"] and step_path(g, g["params"]) == "triton" for g in self.param_groups):
            require_triton()
        self._plans: dict[int, GroupStepPlan] = {}

    @property
    def _step_supports_amp_scaling(self) -> bool:
        """Read by ``torch.amp.GradScaler``: with a fused group it hands over grad_scale/found_inf
        instead of unscaling. A property, so that it survives deepcopy and pickle (torch's
        ``__getstate__`` keeps only defaults, state and param_groups) and follows groups added
        later."""
        return any(g["fused"] for g in self.param_groups)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Validate ``param_group`` (defaults filled in) and add it; nothing changes on error."""
        group = dict(param_group)
        params = group["params"]
        if isinstance(params, set):
            raise TypeError(
                "a param group's params must be an ordered collection (a list): a set's order "
                "changes between runs, and the state dict is matched to parameters by order"
            )
        group["params"] = [params] if isinstance(params, Tensor) else list(params)
        tensors = _tensors_of(group["params"])
        unknown = sorted(set(group) - set(self.defaults) - GROUP_BOOKKEEPING_KEYS)
        if unknown:
            raise ValueError(
                f"unknown param group settings {unknown}; MARS's are {sorted(self.defaults)}"
            )
        if len({id(p) for p in tensors}) != len(tensors):
            raise ValueError(
                "a tensor is listed twice in one param group: it would step twice per step"
            )
        if "weight_decay" in group and "weight_decay_1d" not in group:
            group["weight_decay_1d"] = group["weight_decay"]
        validate_group({**self.defaults, **group})
        complete = {**self.defaults, **group}
        group.setdefault("lr_at_construction", float(complete["lr"]))
        if complete["lr_1d"] is None:
            group["lr_1d"] = group["lr_at_construction"]
        if any(p.is_complex() for p in tensors):
            raise ValueError(
                "MARS takes real parameters: a complex one would square c instead of |c|; "
                "optimise torch.view_as_real(p) instead"
            )
        wrong = next((p.dtype for p in tensors if not p.is_floating_point()), None)
        if wrong is not None:
            raise ValueError(
                f"MARS takes floating-point parameters (float16/bfloat16/float32/float64), got "
                f"one of dtype {wrong}: it has no gradient to step on"
            )
        super().add_param_group(group)
        added = self.param_groups[-1]
        if added["one_buffer"] and any(
            routes_to_mars(p, added) and elementwise_rule(added["mars_type"], p.ndim) == "adam"
            for p in added["params"]
        ):
            self.param_groups.pop()
            raise ValueError(
                "one_buffer: a tensor of this group would take the Adam rule on c (a 1-D tensor "
                "routed to mars-shampoo or mars-m), which needs last_grad; leave optimize_1d and "
                "use_mars unset for 1-D tensors, or use one_buffer=False"
            )
        if added["lr_at_construction"] == 0 and any(
            not routes_to_mars(p, added) for p in added["params"]
        ):
            self.param_groups.pop()
            raise ValueError(
                "lr must be > 0 when a group has tensors on the 1-D AdamW path (their rate is "
                "lr * lr_1d / lr at construction); set optimize_1d=True or use_mars=True, or "
                "start from a positive lr"
            )

    def learning_rate(self, param: Tensor) -> Scalar:
        """The learning rate ``param`` takes at the next step under the current ``lr``: the
        group's ``lr`` on the MARS rule, ``lr * lr_1d / lr0`` on the 1-D AdamW path."""
        for group in self.param_groups:
            if any(p is param for p in group["params"]):
                if routes_to_mars(param, group):
                    return group["lr"]
                return adamw_1d_hyperparams(group).lr
        raise ValueError("the tensor is not a parameter of this optimizer")

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        for group in self.param_groups:
            for setting in SETTINGS:
                group.setdefault(setting.name, setting.default)
            group.setdefault("lr_at_construction", group["lr"])
        # Also run by load_state_dict: the loaded state may lack buffers the settings need.
        self._plans = {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a MARS state dict (``torch.optim`` semantics), then keep two things torch's loader
        would change: state stays in each group's ``state_dtype`` (torch casts it to the
        parameter's dtype), and a group saved before ``lr_at_construction`` existed keeps this
        optimizer's, so the 1-D lr does not jump mid-schedule. A state dict of another optimizer
        (its groups lack MARS's settings) is a ``ValueError`` before anything changes."""
        saved_groups = state_dict["param_groups"]
        for index, saved in enumerate(saved_groups):
            missing = [key for key in FIRST_RELEASE_SETTINGS if key not in saved]
            if missing:
                raise ValueError(
                    f"param group {index} of this state dict lacks MARS's {missing}: it was not "
                    "written by torch_mars.MARS (load the model's weights and start MARS afresh)"
                )
        constructed = [group["lr_at_construction"] for group in self.param_groups]
        # torch casts every state tensor to its parameter's dtype: a bf16 parameter would turn
        # a skip count of 257 into 256. Keep the counts as saved.
        saved_ids = [i for saved in saved_groups for i in saved["params"]]
        params = [p for group in self.param_groups for p in group["params"]]
        counts = {
            param: state_dict["state"][i]["nonfinite_skips"]
            for i, param in zip(saved_ids, params, strict=False)
            if "nonfinite_skips" in state_dict["state"].get(i, {})
        }
        super().load_state_dict(state_dict)
        for group, saved, lr0 in zip(self.param_groups, saved_groups, constructed, strict=False):
            if "lr_at_construction" not in saved:
                group["lr_at_construction"] = lr0
            for param in group["params"]:
                state = self.state.get(param, {})
                if param in counts:
                    state["nonfinite_skips"] = torch.as_tensor(
                        counts[param], dtype=torch.int64, device=param.device
                    ).clone()
                if group["state_dtype"] is None:
                    continue
                for name, value in state.items():
                    stored = isinstance(value, Tensor) and value.is_floating_point()
                    if stored and name != "prev_param" and value.dtype != group["state_dtype"]:
                        state[name] = value.to(group["state_dtype"])

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        """Take one optimisation step and return ``closure()``'s loss (or None).

        ``closure`` re-evaluates the model: it computes the loss on the current batch, calls
        ``backward()`` and returns the loss. It is optional in the approximate mode (called
        once, as by any ``torch.optim`` optimizer). The exact mode requires it and calls it at
        the current parameters and again at the previous ones, zeroing the gradients
        (``set_to_none``) before each call, so a closure that accumulates into ``.grad`` is
        still right; it returns the loss at the current parameters and leaves their gradients
        in ``.grad``, reassigned, never written in place. Loops that can drive the exact mode
        call ``step(closure)`` with a closure that does one forward and backward pass: plain
        PyTorch loops, Lightning's manual optimization. Loops that call ``step()`` without a
        closure (Hugging Face ``Trainer``) or step through a ``GradScaler`` cannot.

        Under ``torch.amp.GradScaler`` with ``fused=True`` the scaler's ``grad_scale`` is divided
        out inside the kernels and ``found_inf`` is read once per step (one host sync) to skip
        the step. Hyperparameters are validated on every eager step; a compiled ``step`` skips
        that check so that it traces without graph breaks.
        """
        if not torch.compiler.is_compiling():
            for group in self.param_groups:
                validate_group(group)
        grad_scale: Tensor | None = getattr(self, "grad_scale", None)
        found_inf: Tensor | None = getattr(self, "found_inf", None)
        exact_groups = [group for group in self.param_groups if not group["is_approx"]]
        if exact_groups and closure is None:
            raise ValueError(
                "closure is required when is_approx=False: exact MARS evaluates the gradient "
                "of the current batch at the current and at the previous parameters. Drive it "
                "with step(closure) (a plain loop, Lightning's manual optimization); loops that "
                "call step() without one, such as Hugging Face's Trainer, need is_approx=True"
            )
        if exact_groups and grad_scale is not None:
            raise ValueError(
                "is_approx=False cannot step through a GradScaler, which takes no closure; use "
                "bf16 autocast without a scaler, or is_approx=True"
            )
        if found_inf is not None and bool(found_inf):
            return None
        loss = None
        if closure is not None:
            if exact_groups:
                self.zero_grad(set_to_none=True)
            with torch.enable_grad():
                loss = closure()
        planned = [self._plan(index) for index in range(len(self.param_groups))]
        plans = [plan for plan, _ in planned]
        self._check_gradients(plans)
        if not torch.compiler.is_compiling():  # checked eagerly, as validate_group is
            self._check_lr_at_construction(plans)
        for group, (plan, rebuilt) in zip(self.param_groups, planned, strict=True):
            if rebuilt:  # a new plan's tensors may lack state: create it, after the checks
                for i, names in plan.buffers.items():
                    self._create_state(group["params"][i], group, names)
                    self._check_state_shapes(group["params"][i], names)
        if exact_groups:
            self._prepare_exact_mode(closure, exact_groups)
        inv_grad_scale = None if grad_scale is None else grad_scale.double().reciprocal()
        for group, plan in zip(self.param_groups, plans, strict=True):
            self._step_group(group, plan, inv_grad_scale)
        return loss

    @torch.no_grad()
    def init_state(self) -> None:
        """Create the state of every parameter that has none, as before a first step: zero
        moments and ``step = 0``, so that a checkpoint can be loaded into it in place
        (``torch.distributed.checkpoint`` needs the state to exist and fills it; in the exact
        mode its own initialisation, a ``step()`` without closure, cannot run). A step taken
        without loading anything behaves as the first step."""
        for group in self.param_groups:
            for param in group["params"]:
                if param.requires_grad:
                    self._create_state(param, group)

    def _create_state(
        self, param: Tensor, group: dict[str, Any], names: tuple[str, ...] | None = None
    ) -> None:
        """Create whatever state ``param`` lacks under its group's settings now: ``step = 0``
        and the buffers ``names`` (by default :func:`state_buffer_names`), zeros except
        ``prev_param`` (a copy of the parameter). The one place where state is created; it
        also puts an existing step count in the form ``cuda_graph`` asks for (run when a plan
        is rebuilt, so after a load or a change of the setting)."""
        state = self.state[param]
        state["step"] = _step_count(state.get("step", 0), param, group["cuda_graph"])
        for name, value in list(state.items()):
            # a buffer kept across a change of state_dtype is converted, not left behind
            stored = isinstance(value, Tensor) and value.is_floating_point() and value.ndim > 0
            if stored and name != "prev_param" and value.dtype != _state_dtype(param, group):
                state[name] = value.to(_state_dtype(param, group))
        if (
            group["skip_nonfinite"]
            and "nonfinite_skips" not in state
            and routes_to_mars(param, group)
        ):
            state["nonfinite_skips"] = torch.zeros((), dtype=torch.int64, device=param.device)
        for name in names or state_buffer_names(param, group):
            if name not in state:
                if name == "prev_param":
                    state[name] = param.detach().clone()
                else:
                    state[name] = torch.zeros_like(
                        param, dtype=_state_dtype(param, group), memory_format=torch.preserve_format
                    )

    def _check_lr_at_construction(self, plans: list[GroupStepPlan]) -> None:
        """The 1-D AdamW path's rate is ``lr * lr_1d / lr_at_construction``: refuse, before any
        tensor steps, a group with tensors on it whose ``lr_at_construction`` is not > 0."""
        for index, (group, plan) in enumerate(zip(self.param_groups, plans, strict=True)):
            lr0 = group["lr_at_construction"]
            if plan.adamw and not (isinstance(lr0, int | float) and math.isfinite(lr0) and lr0 > 0):
                raise ValueError(
                    f"param group {index}: lr_at_construction must be a finite number > 0 when "
                    f"the group has tensors on the 1-D AdamW path, got {lr0!r}"
                )

    def _check_state_shapes(self, param: Tensor, names: tuple[str, ...]) -> None:
        """Refuse, before any tensor steps, a buffer whose shape is no longer its parameter's
        (a parameter reshaped in place, or another tensor put in its place)."""
        state = self.state[param]
        for name in names:
            if state[name].shape != param.shape:
                raise ValueError(
                    f"the state {name!r} of a parameter of shape {tuple(param.shape)} has shape "
                    f"{tuple(state[name].shape)}: the parameter changed shape since it last "
                    "stepped; clear its state (optimizer.state.pop(param)) to start it afresh"
                )

    def nonfinite_skips(self) -> Tensor:
        """The number of (tensor, step) pairs skipped so far under ``skip_nonfinite``, summed
        over the parameters: a 0-d int64 tensor on the first parameter's device (reading it
        on the host synchronises; ``state[p]["nonfinite_skips"]`` has each tensor's count)."""
        counts = [
            state["nonfinite_skips"] for state in self.state.values() if "nonfinite_skips" in state
        ]
        params = [p for group in self.param_groups for p in group["params"]]
        device = params[0].device if params else torch.device("cpu")
        if not counts:
            return torch.zeros((), dtype=torch.int64, device=device)
        return sum(count.to(device) for count in counts)  # type: ignore[return-value]

    def _count_skips(self, params: list[Tensor], gates: list[Tensor] | None) -> None:
        """Add each skipped tensor's step to its ``nonfinite_skips`` (on the device)."""
        if gates is None:
            return
        counts = [self.state[p]["nonfinite_skips"] for p in params]
        for indices in group_indices([count.device for count in counts]):
            skipped = torch.stack([gates[i] for i in indices]).eq(0)
            torch._foreach_add_([counts[i] for i in indices], list(skipped.unbind()))

    def _plan(self, index: int) -> tuple[GroupStepPlan, bool]:
        """The step plan of param group ``index`` (:mod:`~torch_mars.optim.step_plan`), and
        whether it was just rebuilt because what it was derived from changed. Keyed by
        position, not by ``id(group)``, which torch.compile before 2.13 cannot trace."""
        group = self.param_groups[index]
        key = plan_key(group)
        plan = self._plans.get(index)
        if plan is not None and plan.key == key:
            return plan, False
        plan = build_plan(group, key)
        self._plans[index] = plan
        return plan, True

    def _check_gradients(self, plans: list[GroupStepPlan]) -> None:
        for group, plan in zip(self.param_groups, plans, strict=True):
            for param in group["params"]:
                if param.grad is not None and param.grad.is_sparse:
                    raise ValueError(
                        "gradients must be dense: MARS does not support sparse gradients "
                        "(use a dense nn.Embedding, sparse=False)"
                    )
            if plan.sharding is not None:
                from torch_mars.distributed.group_sharding import check_gradients

                check_gradients(group["params"])

    def _effective_grad(
        self, param: Tensor, group: dict[str, Any], inv_grad_scale: Tensor | None = None
    ) -> Tensor:
        """The gradient being descended, as a new tensor in the state dtype (negated when
        maximising, unscaled when a GradScaler's scale is given)."""
        assert param.grad is not None
        grad = param.grad.neg() if group["maximize"] else param.grad.clone()
        if inv_grad_scale is not None:
            grad.mul_(inv_grad_scale.to(grad.dtype))
        return grad.to(_state_dtype(param, group))

    def _prepare_exact_mode(
        self, closure: Callable[[], Any], exact_groups: list[dict[str, Any]]
    ) -> None:
        """Fill ``last_grad`` with the gradient at the previous parameters on the current batch,
        leave ``p`` and ``p.grad`` at their current values, and record ``prev_param = x_t``."""
        exact_params = [p for group in exact_groups for p in group["params"]]
        # A tensor's first step (step 0, also after init_state) has no previous point.
        moved = [p for p in exact_params if self._has_previous_parameters(p)]
        needs_previous_gradient = [
            (p, group)
            for group in exact_groups
            for p in group["params"]
            if p.grad is not None and self._has_previous_parameters(p) and routes_to_mars(p, group)
        ]
        if needs_previous_gradient:
            # The gradients at x_t are copied (under DDP's gradient_as_bucket_view the second
            # backward writes into the same bucket storage) and handed back by reassignment.
            current_grads = {
                p: None if p.grad is None else p.grad.clone()
                for group in self.param_groups
                for p in group["params"]
            }
            current_values = [p.detach().clone() for p in moved]
            _copy_locally(moved, [self.state[p]["prev_param"] for p in moved])
            self.zero_grad(set_to_none=True)
            with torch.enable_grad():
                closure()
            for param, group in needs_previous_gradient:
                last_grad = self.state[param]["last_grad"]
                if param.grad is None:
                    last_grad.zero_()
                    continue
                last_grad.copy_(param.grad)
                if group["maximize"]:
                    last_grad.neg_()
            _copy_locally(moved, current_values)
            for param, grad in current_grads.items():
                param.grad = grad
        for param in exact_params:
            if "prev_param" in self.state.get(param, {}):
                self.state[param]["prev_param"].copy_(param)

    def _has_previous_parameters(self, param: Tensor) -> bool:
        # .get: reading must not add an empty entry to the defaultdict for a tensor never stepped.
        state = self.state.get(param, {})
        return "prev_param" in state and state["step"] > 0

    def _step_group(
        self, group: dict[str, Any], plan: GroupStepPlan, inv_grad_scale: Tensor | None
    ) -> None:
        mars_tensors = self._step_tensors(group, plan.mars, True, inv_grad_scale)
        adamw_tensors = self._step_tensors(group, plan.adamw, False, inv_grad_scale)
        if plan.sharding is not None:
            self._step_sharded_group(group, plan, mars_tensors, adamw_tensors, inv_grad_scale)
            return
        for tensors, hp in _first_steps_apart(mars_tensors, group):
            gates = mars_step(
                tensors,
                hp,
                store_last_grad=group["is_approx"],
                implementation=plan.mars_path,
                inv_grad_scale=inv_grad_scale,
            )
            self._count_skips(tensors.params, gates)
        if adamw_tensors.params:
            adamw_step(
                adamw_tensors,
                adamw_1d_hyperparams(group),
                implementation=plan.adamw_path,
                inv_grad_scale=inv_grad_scale,
            )

    def _step_tensors(
        self,
        group: dict[str, Any],
        indices: tuple[int, ...],
        use_mars: bool,
        inv_grad_scale: Tensor | None,
    ) -> StepTensors:
        """The tensors ``group["params"][i]`` for ``i`` in ``indices`` (the plan's MARS-routed
        ones when ``use_mars``, else its AdamW-routed ones), with their gradients, state and
        incremented step counts. On a MARS tensor's first step (``step == 0``) its
        ``last_grad`` takes the gradient itself: ``g_tilde = g`` (the paper's ``x_1 = x_0``),
        which a skipped first step leaves for the next, and the step runs with ``gamma = 0``
        (:func:`_first_steps_apart`), so ``c = g``; under ``cuda_graph`` the kernels do both on
        the device, and the step counts, device tensors, advance in one multi-tensor add."""
        tensors = StepTensors([], [], [], [])
        on_device_steps = group["cuda_graph"]
        for i in indices:
            param = group["params"][i]
            state = self.state[param]
            if not state:  # state cleared since the plan was built
                self._create_state(param, group)
            if not on_device_steps and use_mars and state["step"] == 0 and "last_grad" in state:
                first_grad = self._effective_grad(param, group, inv_grad_scale)
                if group["skip_nonfinite"]:
                    # A non-finite g skips this step; g_tilde must stay finite for the next.
                    first_grad.nan_to_num_(0.0, 0.0, 0.0)
                state["last_grad"].copy_(first_grad)
            if not on_device_steps:
                state["step"] += 1
            tensors.steps.append(state["step"])
            tensors.params.append(param)
            tensors.grads.append(param.grad)
            tensors.exp_avgs.append(state["exp_avg"])
            tensors.exp_avg_sqs.append(state.get("exp_avg_sq"))
            if group["amsgrad"]:
                tensors.max_exp_avg_sqs.append(state.get("max_exp_avg_sq"))
            if use_mars and "last_grad" in state:
                tensors.last_grads.append(state["last_grad"])
        if on_device_steps and tensors.steps:
            torch._foreach_add_(tensors.steps, 1.0)
        return tensors

    def _step_sharded_group(
        self,
        group: dict[str, Any],
        plan: GroupStepPlan,
        mars_tensors: StepTensors,
        adamw_tensors: StepTensors,
        inv_grad_scale: Tensor | None,
    ) -> None:
        """A group of ``DTensor``s on the plan's paths: the MARS tensors on local shards with
        whole-tensor collectives, or by ``DTensor`` ops; the AdamW tensors over the same local
        tensors (gradients unscaled by the sharding, not by a kernel)."""
        sharding = plan.sharding
        for tensors, hp in _first_steps_apart(mars_tensors, group):
            local, whole = sharding.local(tensors, inv_grad_scale)
            gates = mars_step(
                local,
                hp,
                store_last_grad=group["is_approx"],
                implementation=plan.mars_path,
                whole=whole,
            )
            if gates is not None:
                from torch_mars.distributed.layout import local_tensor

                gates = [local_tensor(gate) for gate in gates]  # DTensor ops give DTensor gates
            self._count_skips(tensors.params, gates)
        if adamw_tensors.params:
            local, _ = sharding.local(adamw_tensors, inv_grad_scale)
            adamw_step(local, adamw_1d_hyperparams(group), implementation=plan.adamw_path)


def _first_steps_apart(
    tensors: StepTensors, group: dict[str, Any]
) -> list[tuple[StepTensors, MarsHyperparams]]:
    """A group's MARS tensors in the parts that step alike, each with its hyperparameters:
    those on their first step apart, with ``gamma = 0``. Their ``g_tilde`` is ``g``, so
    ``c = g``; computed as ``g + s (g - g_tilde)`` it would keep ``s (g - bf16(g))`` where
    ``g_tilde`` is stored in bf16. Under ``cuda_graph`` (steps on the device) the kernels zero
    ``s`` there instead; under ``one_buffer`` the first step has its own coefficients."""
    hp = mars_hyperparams(group)
    if not tensors.params:
        return []
    if group["cuda_graph"] or hp.one_buffer:
        return [(tensors, hp)]
    first = [i for i, step in enumerate(tensors.steps) if step == 1]
    if not first:
        return [(tensors, hp)]
    later = [i for i, step in enumerate(tensors.steps) if step != 1]
    parts = [(tensors.select(first), dataclasses.replace(hp, gamma=0.0))]
    return parts + ([(tensors.select(later), hp)] if later else [])


def _tensors_of(params: list[Any]) -> list[Tensor]:
    """The tensors of a group's ``params``, which may be ``(name, tensor)`` pairs as
    ``model.named_parameters()`` gives them (``torch.optim`` keeps the names as
    ``param_names``); anything else is a ``TypeError`` naming what it got."""
    tensors = []
    for param in params:
        if isinstance(param, tuple) and len(param) == 2 and isinstance(param[1], Tensor):
            param = param[1]
        if not isinstance(param, Tensor):
            raise TypeError(
                "MARS params must be tensors or (name, tensor) pairs as named_parameters() "
                f"gives them, got {type(param).__name__}"
            )
        tensors.append(param)
    return tensors


def _copy_locally(targets: list[Tensor], sources: list[Tensor]) -> None:
    """``targets[i].copy_(sources[i])`` with one multi-tensor copy, or one by one for
    ``DTensor``s, which have no multi-tensor copy (the pairs share their placements, so no
    collective runs)."""
    if group_sharding_of(targets) is None:
        torch._foreach_copy_(targets, sources)
        return
    for target, source in zip(targets, sources, strict=True):
        target.copy_(source)


def _step_count(step: int | Tensor, param: Tensor, on_device: bool) -> int | Tensor:
    """A step count in the form the group keeps: a 0-d float32 tensor on ``param``'s device
    under ``cuda_graph``, else an int (read from a tensor once, when the setting changed)."""
    if not on_device:
        return int(step)
    if isinstance(step, Tensor) and step.dtype == torch.float32 and step.device == param.device:
        return step
    return torch.as_tensor(step, dtype=torch.float32).to(param.device).reshape(())


# Keys a param group may hold besides MARS's settings: its tensors (and torch's names for them),
# the lr it was built with, and what torch's lr schedulers add.
GROUP_BOOKKEEPING_KEYS = frozenset({"params", "param_names", "lr_at_construction", "initial_lr"})


def _state_dtype(param: Tensor, group: dict[str, Any]) -> torch.dtype:
    return group["state_dtype"] or param.dtype
