"""The fused step for CUDA: multi-tensor Triton kernels for MARS-AdamW, MARS-Lion, the element-wise
part of MARS-Shampoo (its Newton-Schulz step follows in :mod:`torch_mars.optim.functional`), and
the plain AdamW path of 1-D tensors.

One step of a (device, dtypes) group is at most two launches over all its tensors, whatever
their number. Work is cut into chunks of ``BLOCK`` elements; a chunk table maps each program to
its tensor and offset, and an address table gives each tensor's ``p, g, g_tilde, m, v, v_max``.

1. ``_mars_norm_kernel`` (MARS tensors only) forms ``c = g + s (g - g_tilde)`` and adds each
   chunk's ``sum(c^2)`` into its tensor's slot with an atomic add.
2. ``_mars_update_kernel`` forms ``c`` again (``g`` and ``g_tilde`` are re-read, mostly from L2
   for tensors that fit), scales it by ``1 / max(1, ||c||)`` and applies the tensor's rule.
   Without the clip and the non-finite skip, the norm kernel is not launched: one pass.
   Under ``skip_nonfinite`` a tensor whose ``||c||`` is not finite has every store masked off.
   Under ``one_buffer`` (no clip, no ``g_tilde``) it keeps one buffer, ``u <- beta1 u + a g``,
   forms ``m_t = gamma g + beta1 u`` and applies Lion's rule, or writes ``m_t`` out for the
   Newton-Schulz step of a matrix; the norm kernel then sums ``g^2`` for the skip alone.

Loads convert to float32 (float64 for float64 parameters) and stores convert back, so bf16/fp16
parameters and bf16 state use fp32 math. A GradScaler's scale is divided out in the kernels.
Triton is optional (``pip install torch-mars[triton]``); the kernels also run on CPU tensors
under ``TRITON_INTERPRET=1``, which is how CI tests them.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy
import torch
from torch import Tensor

from torch_mars.kernels import TRITON_AVAILABLE, require_triton
from torch_mars.kernels.compiled_step import coefficient_values
from torch_mars.optim.settings import unsupported
from torch_mars.optim.step_math import (
    ELEMENTWISE_RULES,
    correction_scale,
    elementwise_rule,
    finite_gates,
    one_buffer_coefficients,
)
from torch_mars.optim.step_types import (
    AdamWHyperparams,
    MarsHyperparams,
    StepCount,
    StepTensors,
    group_indices,
)

BLOCK = 1024
NORM_CHUNKS_PER_PROGRAM = 8

# Columns of the per-tensor coefficient table and of the address table; constexpr so that the
# kernels can use them.
COEFFICIENT_LR, COEFFICIENT_BETA1, COEFFICIENT_BETA2, COEFFICIENT_EPS, COEFFICIENT_WD = range(5)
COEFFICIENT_SCALE, COEFFICIENT_BC1, COEFFICIENT_BC2_SQRT, COEFFICIENT_RULE = range(5, 9)
_RULE_COLUMN = COEFFICIENT_RULE  # a plain int for the host's tables
# 1 on a ``cuda_graph`` step's first step (g_tilde = g, with the scale zeroed), else 0.
COEFFICIENT_FIRST = 9
# gamma, read under ``one_buffer`` (m_t = gamma g + beta1 u); there the scale column holds the
# buffer's coefficient ``a`` of the tensor's step (step_math.one_buffer_coefficients).
COEFFICIENT_GAMMA = 10
N_COEFFICIENTS = 11
COLUMN_P, COLUMN_G, COLUMN_LAST_G, COLUMN_M, COLUMN_V, COLUMN_V_MAX = range(6)
N_ADDRESSES = 6
# Codes of the rules in the coefficient table: their index in ELEMENTWISE_RULES.
RULE_LION, RULE_MOMENTUM = ELEMENTWISE_RULES.index("lion"), ELEMENTWISE_RULES.index("momentum")


if TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    # Kernels may only read module globals that are constexpr.
    for _name, _value in list(globals().items()):
        if _name.startswith(("COEFFICIENT_", "COLUMN_", "RULE_", "N_")):
            globals()[_name] = tl.constexpr(_value)

    @triton.jit
    def _load_tensor(
        addresses,
        tensor,
        column: tl.constexpr,
        offsets,
        mask,
        dtype: tl.constexpr,
        compute: tl.constexpr,
    ):
        pointer = tl.load(addresses + tensor * N_ADDRESSES + column)
        pointer = pointer.to(tl.pointer_type(dtype), bitcast=True)
        return tl.load(pointer + offsets, mask=mask, other=0.0).to(compute)

    @triton.jit
    def _store_tensor(
        addresses, tensor, column: tl.constexpr, offsets, mask, value, dtype: tl.constexpr
    ):
        pointer = tl.load(addresses + tensor * N_ADDRESSES + column)
        pointer = pointer.to(tl.pointer_type(dtype), bitcast=True)
        tl.store(pointer + offsets, value.to(dtype), mask=mask)

    @triton.jit
    def _gradients(
        addresses,
        row,
        tensor,
        offsets,
        mask,
        inv_grad_scale,
        G_DTYPE: tl.constexpr,
        S_DTYPE: tl.constexpr,
        COMPUTE: tl.constexpr,
        IS_MARS: tl.constexpr,
        HAS_GRAD_SCALE: tl.constexpr,
        MAXIMIZE: tl.constexpr,
    ):
        """``(g, c)``: the unscaled (negated when maximising) gradient and, for MARS tensors, the
        unclipped ``c = g + s (g - g_tilde)`` (``c = g`` otherwise)."""
        g = _load_tensor(addresses, tensor, COLUMN_G, offsets, mask, G_DTYPE, COMPUTE)
        if HAS_GRAD_SCALE:
            g = g * tl.load(inv_grad_scale).to(COMPUTE)
        if MAXIMIZE:
            g = -g
        c = g
        if IS_MARS:
            last = _load_tensor(addresses, tensor, COLUMN_LAST_G, offsets, mask, S_DTYPE, COMPUTE)
            c = g - tl.load(row + COEFFICIENT_SCALE).to(COMPUTE) * (last - g)
        return g, c

    @triton.jit
    def _mars_norm_kernel(
        addresses,
        numels,
        coefficients,
        chunk_tensor,
        chunk_start,
        norm_sq,
        inv_grad_scale,
        G_DTYPE: tl.constexpr,
        S_DTYPE: tl.constexpr,
        COMPUTE: tl.constexpr,
        HAS_GRAD_SCALE: tl.constexpr,
        MAXIMIZE: tl.constexpr,
        BLOCK: tl.constexpr,
        CHUNKS: tl.constexpr,
        READS_LAST_G: tl.constexpr,
    ):
        program = tl.program_id(0)
        tensor = tl.load(chunk_tensor + program)
        start = tl.load(chunk_start + program)
        numel = tl.load(numels + tensor)
        row = coefficients + tensor * N_COEFFICIENTS
        # Squares summed in float64: a finite float32 or bf16 c of 1e19 per entry must not
        # overflow to inf (and be skipped as non-finite) while its norm is formed.
        total = tl.zeros((BLOCK,), dtype=tl.float64)
        for chunk in range(CHUNKS):
            offsets = start + chunk * BLOCK + tl.arange(0, BLOCK)
            mask = offsets < numel
            _, c = _gradients(
                addresses,
                row,
                tensor,
                offsets,
                mask,
                inv_grad_scale,
                G_DTYPE,
                S_DTYPE,
                COMPUTE,
                READS_LAST_G,
                HAS_GRAD_SCALE,
                MAXIMIZE,
            )
            wide = c.to(tl.float64)
            total += wide * wide
        tl.atomic_add(norm_sq + tensor, tl.sum(total, axis=0))

    @triton.jit
    def _mars_update_kernel(
        addresses,
        numels,
        coefficients,
        chunk_tensor,
        chunk_start,
        norm_sq,
        inv_grad_scale,
        P_DTYPE: tl.constexpr,
        G_DTYPE: tl.constexpr,
        S_DTYPE: tl.constexpr,
        COMPUTE: tl.constexpr,
        IS_MARS: tl.constexpr,
        STORE_LAST_GRAD: tl.constexpr,
        AMSGRAD: tl.constexpr,
        HAS_GRAD_SCALE: tl.constexpr,
        MAXIMIZE: tl.constexpr,
        SKIP_NONFINITE: tl.constexpr,
        CLIP: tl.constexpr,
        BLOCK: tl.constexpr,
        READS_LAST_G: tl.constexpr,
        ONE_BUFFER: tl.constexpr,
    ):
        program = tl.program_id(0)
        tensor = tl.load(chunk_tensor + program)
        offsets = tl.load(chunk_start + program) + tl.arange(0, BLOCK)
        in_bounds = offsets < tl.load(numels + tensor)
        mask = in_bounds
        if SKIP_NONFINITE:
            # NaN < inf is False too: a tensor whose ||c|| is not finite writes nothing.
            mask = tl.where(tl.load(norm_sq + tensor) < float("inf"), in_bounds, False)
        row = coefficients + tensor * N_COEFFICIENTS
        lr = tl.load(row + COEFFICIENT_LR).to(COMPUTE)
        beta1 = tl.load(row + COEFFICIENT_BETA1).to(COMPUTE)
        weight_decay = tl.load(row + COEFFICIENT_WD).to(COMPUTE)
        rule = tl.load(row + COEFFICIENT_RULE).to(tl.int32)

        # Read in bounds, not under the skip's mask: a ``cuda_graph`` first step keeps g even
        # when the tensor is skipped.
        g, c = _gradients(
            addresses,
            row,
            tensor,
            offsets,
            in_bounds,
            inv_grad_scale,
            G_DTYPE,
            S_DTYPE,
            COMPUTE,
            READS_LAST_G,
            HAS_GRAD_SCALE,
            MAXIMIZE,
        )
        if ONE_BUFFER:
            # u <- beta1 u + a g and m_t = gamma g + beta1 u (no clip, no g_tilde); a skipped
            # tensor (||g|| not finite) keeps u, and its m_t, beta1 u, is still written for
            # Newton-Schulz (whose update the gate then cancels), as the compiled kernel does.
            if SKIP_NONFINITE:
                g = tl.where(tl.load(norm_sq + tensor) < float("inf"), g, 0.0)
            u = _load_tensor(addresses, tensor, COLUMN_M, offsets, in_bounds, S_DTYPE, COMPUTE)
            a = tl.load(row + COEFFICIENT_SCALE).to(COMPUTE)
            updated = u * beta1 + g * a
            _store_tensor(addresses, tensor, COLUMN_M, offsets, mask, updated, S_DTYPE)
            u = tl.where(mask, updated, u)
            m = g * tl.load(row + COEFFICIENT_GAMMA).to(COMPUTE) + u * beta1
            if rule == RULE_MOMENTUM:
                _store_tensor(addresses, tensor, COLUMN_LAST_G, offsets, in_bounds, m, S_DTYPE)
        else:
            if IS_MARS and CLIP:
                c = c / tl.maximum(tl.sqrt(tl.load(norm_sq + tensor)), 1.0).to(COMPUTE)
            if IS_MARS and STORE_LAST_GRAD:
                kept = g
                kept_mask = mask
                if SKIP_NONFINITE:
                    # A ``cuda_graph`` first step keeps g, non-finite entries zeroed, even when
                    # the tensor is skipped: what MARS._step_tensors writes on the host
                    # otherwise.
                    first = tl.load(row + COEFFICIENT_FIRST) != 0
                    kept = tl.where(first, tl.where(tl.abs(g) < float("inf"), g, 0.0), g)
                    kept_mask = tl.where(first, in_bounds, mask)
                _store_tensor(addresses, tensor, COLUMN_LAST_G, offsets, kept_mask, kept, S_DTYPE)
            m = _load_tensor(addresses, tensor, COLUMN_M, offsets, mask, S_DTYPE, COMPUTE)
            m = m + (1.0 - beta1) * (c - m)
            _store_tensor(addresses, tensor, COLUMN_M, offsets, mask, m, S_DTYPE)
        if rule != RULE_MOMENTUM:
            p = _load_tensor(addresses, tensor, COLUMN_P, offsets, mask, P_DTYPE, COMPUTE)
            p = p * (1.0 - lr * weight_decay)
            if rule == RULE_LION:
                direction = tl.where(m > 0, 1.0, tl.where(m < 0, -1.0, 0.0)).to(COMPUTE)
                p = p - lr * direction
            else:
                beta2 = tl.load(row + COEFFICIENT_BETA2).to(COMPUTE)
                v = _load_tensor(addresses, tensor, COLUMN_V, offsets, mask, S_DTYPE, COMPUTE)
                v = v * beta2 + (1.0 - beta2) * c * c
                _store_tensor(addresses, tensor, COLUMN_V, offsets, mask, v, S_DTYPE)
                if AMSGRAD:
                    v_max = _load_tensor(
                        addresses, tensor, COLUMN_V_MAX, offsets, mask, S_DTYPE, COMPUTE
                    )
                    v = tl.maximum(v_max, v)
                    _store_tensor(addresses, tensor, COLUMN_V_MAX, offsets, mask, v, S_DTYPE)
                bias_correction1 = tl.load(row + COEFFICIENT_BC1).to(COMPUTE)
                bias_correction2_sqrt = tl.load(row + COEFFICIENT_BC2_SQRT).to(COMPUTE)
                eps = tl.load(row + COEFFICIENT_EPS).to(COMPUTE)
                denom = tl.sqrt(v) / bias_correction2_sqrt + eps
                p = p - (lr / bias_correction1) * m / denom
            _store_tensor(addresses, tensor, COLUMN_P, offsets, mask, p, P_DTYPE)

    _TRITON_DTYPES = {
        torch.float32: tl.float32,
        torch.float16: tl.float16,
        torch.bfloat16: tl.bfloat16,
        torch.float64: tl.float64,
    }


def common_constexprs(
    grad_dtype: torch.dtype,
    state_dtype: torch.dtype,
    compute: torch.dtype,
    has_grad_scale: bool,
    maximize: bool,
) -> dict[str, Any]:
    """The compile-time arguments both kernels take (Triton dtypes and flags)."""
    return {
        "G_DTYPE": _TRITON_DTYPES[grad_dtype],
        "S_DTYPE": _TRITON_DTYPES[state_dtype],
        "COMPUTE": _TRITON_DTYPES[compute],
        "HAS_GRAD_SCALE": has_grad_scale,
        "MAXIMIZE": maximize,
        "BLOCK": BLOCK,
    }


def update_constexprs(
    common: dict[str, Any],
    param_dtype: torch.dtype,
    is_mars: bool,
    store_last_grad: bool,
    amsgrad: bool,
    skip_nonfinite: bool,
    clip: bool,
    one_buffer: bool = False,
) -> dict[str, Any]:
    """The update kernel's compile-time arguments: ``common`` plus its own. The plain AdamW
    path (``is_mars=False``) stores no last gradient, skips and clips nothing; under
    ``one_buffer`` (MARS, no clip) there is no ``g_tilde`` to read or store."""
    one_buffer = is_mars and one_buffer
    return {
        **common,
        "P_DTYPE": _TRITON_DTYPES[param_dtype],
        "IS_MARS": is_mars,
        "STORE_LAST_GRAD": is_mars and store_last_grad and not one_buffer,
        "AMSGRAD": amsgrad,
        "SKIP_NONFINITE": is_mars and skip_nonfinite,
        "CLIP": is_mars and clip and not one_buffer,
        "READS_LAST_G": is_mars and not one_buffer,
        "ONE_BUFFER": one_buffer,
    }


@dataclass(frozen=True)
class Specialization:
    """One compiled variant of a kernel that :func:`_launch` can ask for.

    Attributes:
        kernel: ``"_mars_norm_kernel"`` or ``"_mars_update_kernel"`` (or another module's
            kernel, :func:`torch_mars.kernels.triton_symmetric.launch_specializations`).
        signature: Triton type of every argument (``"*fp32"`` for pointers, ``"constexpr"``).
        constexprs: the compile-time arguments, as the launcher passes them.
        options: the launch's compile options (``num_warps``) where not Triton's defaults.
        attrs: argument attributes a launch specializes on (``tt.divisibility`` 16 of the
            pointers and sizes of the shapes it is built for), by argument index.
    """

    kernel: str
    signature: dict[str, str]
    constexprs: dict[str, Any]
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    attrs: dict[tuple[int, ...], list] = dataclasses.field(default_factory=dict)


_POINTER_ARGS = ("addresses", "numels", "coefficients", "chunk_tensor", "chunk_start")
# Parameter dtypes the kernels take, each with the state dtypes ``state_dtype`` can give it.
_DTYPE_PAIRS = [
    (torch.float32, torch.float32),
    (torch.float32, torch.bfloat16),
    (torch.bfloat16, torch.bfloat16),
    (torch.bfloat16, torch.float32),
    (torch.float16, torch.float16),
    (torch.float16, torch.float32),
    (torch.float16, torch.bfloat16),
    (torch.float64, torch.float64),
    (torch.float64, torch.float32),
    (torch.float64, torch.bfloat16),
]


def launch_specializations() -> list[Specialization]:
    """Every (kernel, dtypes, flags) variant :func:`_launch` can compile: for each parameter
    dtype (gradients in the same dtype) and state dtype, the norm kernel under each grad-scale
    and maximize flag, and the update kernel for MARS (last-gradient store, AMSGrad, grad
    scale, maximize, non-finite skip, clip) and for plain AdamW (AMSGrad, grad scale,
    maximize)."""
    flags = (False, True)
    specializations = []
    for param_dtype, state_dtype in _DTYPE_PAIRS:
        compute = torch.float64 if param_dtype == torch.float64 else torch.float32
        for has_scale, maximize in itertools.product(flags, flags):
            common = common_constexprs(param_dtype, state_dtype, compute, has_scale, maximize)
            pointers = {name: "*i64" for name in _POINTER_ARGS}
            pointers |= {"coefficients": "*fp64", "chunk_tensor": "*i32"}
            # inv_grad_scale: the float64 scale, or norm_sq standing in when there is none
            pointers["norm_sq"] = pointers["inv_grad_scale"] = "*fp64"
            for reads_last_g in flags:
                norm = {
                    **common,
                    "CHUNKS": NORM_CHUNKS_PER_PROGRAM,
                    "READS_LAST_G": reads_last_g,
                }
                specializations.append(
                    Specialization(
                        "_mars_norm_kernel", pointers | dict.fromkeys(norm, "constexpr"), norm
                    )
                )
            variants = [
                (True, *rest, False) for rest in itertools.product(flags, flags, flags, flags)
            ]
            variants += [(False, False, amsgrad, False, False, False) for amsgrad in flags]
            variants += [(True, False, False, skip, False, True) for skip in flags]
            for is_mars, store, amsgrad, skip, clip, one_buffer in variants:
                update = update_constexprs(
                    common, param_dtype, is_mars, store, amsgrad, skip, clip, one_buffer
                )
                specializations.append(
                    Specialization(
                        "_mars_update_kernel", pointers | dict.fromkeys(update, "constexpr"), update
                    )
                )
    return specializations


def _address_rows(
    tensors: StepTensors, is_mars: bool, amsgrad: bool
) -> tuple[tuple[int, ...], ...]:
    """Each tensor's row of data pointers, in the kernels' column order (0 for a buffer it does
    not have). List comprehensions over the columns, not a call per tensor: this runs on every
    step, and on a GPU the host's time is the step's time until the kernels are queued."""
    n = len(tensors)

    def pointers(buffer: list[Tensor | None], used: bool = True) -> list[int]:
        if not used or not buffer:
            return [0] * n
        return [0 if t is None else t.data_ptr() for t in buffer]

    return tuple(
        zip(
            pointers(tensors.params),
            pointers(tensors.grads),
            pointers(tensors.last_grads, is_mars),
            pointers(tensors.exp_avgs),
            pointers(tensors.exp_avg_sqs),
            pointers(tensors.max_exp_avg_sqs, amsgrad),
            strict=True,
        )
    )


def _coefficient_table(
    hp: AdamWHyperparams,
    scale: object,
    steps: list[StepCount],
    rules: list[int],
    device: torch.device,
) -> Tensor:
    """The ``(n, N_COEFFICIENTS)`` float64 table of per-tensor coefficients, built without a
    host read of a tensor hyperparameter: one row per distinct step count (usually one),
    gathered per tensor. Tensor step counts (``cuda_graph``) take
    :func:`_device_coefficient_table`."""
    if steps and isinstance(steps[0], Tensor):
        return _device_coefficient_table(hp, scale, steps, rules, device)
    distinct = sorted(set(steps))
    one_buffer = isinstance(hp, MarsHyperparams) and hp.one_buffer
    gamma = hp.gamma if isinstance(hp, MarsHyperparams) else 0.0
    step_rows = [
        [
            *coefficient_values(
                hp, one_buffer_coefficients(hp, step == 1)[0] if one_buffer else scale, step
            ),
            0.0,
            gamma,
        ]
        for step in distinct
    ]
    if not any(isinstance(v, Tensor) for row in step_rows for v in row):
        # Built in numpy from the distinct rows, not from n Python lists nor with torch ops:
        # this runs on every step, before the kernels can be queued, and one copy to the
        # device is its only dispatch.
        by_step = numpy.array(step_rows, dtype=numpy.float64)
        if len(distinct) == 1:
            rows = numpy.broadcast_to(by_step, (len(steps), by_step.shape[1]))
        else:
            position = {step: index for index, step in enumerate(distinct)}
            rows = by_step[[position[step] for step in steps]]
        table = torch.from_numpy(numpy.insert(rows, _RULE_COLUMN, rules, axis=1))
        return table.to(device, non_blocking=True)
    stacked = torch.stack(
        [
            torch.stack(
                [torch.as_tensor(v, dtype=torch.float64, device=device).reshape(()) for v in row]
            )
            for row in step_rows
        ]
    )
    host = torch.tensor(
        [[distinct.index(step), rule] for step, rule in zip(steps, rules, strict=True)]
    ).to(device, non_blocking=True)
    gathered = stacked[host[:, 0]]
    rule = _RULE_COLUMN
    return torch.cat([gathered[:, :rule], host[:, 1:].double(), gathered[:, rule:]], dim=1)


def _device_coefficient_table(
    hp: AdamWHyperparams,
    scale: object,
    steps: list[Tensor],
    rules: list[int],
    device: torch.device,
) -> Tensor:
    """The coefficient table of a ``cuda_graph`` step, computed on the device from each
    tensor's step count (0-d tensors, already incremented): the bias corrections, the first
    step's flag, and on it a zero scale, so ``c = g``. Nothing is copied from the host per step,
    so a CUDA graph replays it: float hyperparameters are device scalars made once
    (:func:`_device_scalar`; a float changed later makes a new one outside the graph, so
    schedule ``lr`` through a tensor on the device), tensor ones are read where they are."""
    step = torch.stack(steps).to(torch.float64)
    first = (step == 1).to(torch.float64)
    lr, beta1, beta2, eps, weight_decay, scale_value = (
        _as_device_scalar(value, device)
        for value in (hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay, scale)
    )
    n = len(steps)
    columns = [
        lr.expand(n),
        beta1.expand(n),
        beta2.expand(n),
        eps.expand(n),
        weight_decay.expand(n),
        scale_value * (1.0 - first),
        1.0 - beta1**step,
        (1.0 - beta2**step).sqrt(),
        _held_for_graphs(_rule_codes(tuple(rules), device)),
        first,
        torch.zeros_like(first),  # gamma: read only under one_buffer, which cuda_graph refuses
    ]
    return torch.stack(columns, dim=1)


def _as_device_scalar(value: object, device: torch.device) -> Tensor:
    if isinstance(value, Tensor):
        return value.to(device, torch.float64).reshape(())
    return _held_for_graphs(_device_scalar(float(value), device))  # type: ignore[arg-type]


# The device constants below are cached across steps, and a captured CUDA graph reads them by
# address without keeping a reference: those a capture uses (and the pinned host memory that
# a copy recorded in a graph reads again at every replay) are held here for the process's life,
# so that a cache eviction cannot free them under a graph. A few KB per capture.
_HELD_FOR_GRAPHS: list[Tensor] = []


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _held_for_graphs(tensor: Tensor) -> Tensor:
    """``tensor``, held for the process's life when a CUDA graph is being captured."""
    if _capturing(tensor.device):
        _HELD_FOR_GRAPHS.append(tensor)
    return tensor


def _to_device(
    values: list[Any] | tuple[Any, ...], dtype: torch.dtype, device: torch.device
) -> Tensor:
    """``values`` as a tensor on ``device``. During a CUDA-graph capture the copy is made from
    pinned memory (the only host copy a graph may record), which is held for the replays."""
    host = torch.tensor(values, dtype=dtype)
    if _capturing(device):
        host = host.pin_memory()
        _HELD_FOR_GRAPHS.append(host)
    return host.to(device, non_blocking=True)


@functools.lru_cache(maxsize=256)
def _device_scalar(value: float, device: torch.device) -> Tensor:
    """A float64 0-d tensor of ``value`` on ``device``, made once (read only)."""
    return _to_device(value, torch.float64, device)  # type: ignore[arg-type]


@functools.lru_cache(maxsize=64)
def _rule_codes(rules: tuple[int, ...], device: torch.device) -> Tensor:
    return _to_device(rules, torch.float64, device)


@functools.lru_cache(maxsize=64)
def _address_table(rows: tuple[tuple[int, ...], ...], device: torch.device) -> Tensor:
    """The ``(n, N_ADDRESSES)`` table of data pointers on ``device``. Cached by the pointers
    themselves, so a step whose tensors sit where they sat (static gradients, a CUDA graph)
    copies nothing from the host."""
    return _to_device(rows, torch.int64, device)


def _launch(
    tensors: StepTensors,
    hp: AdamWHyperparams,
    scale: object,
    rules: list[int],
    is_mars: bool,
    store_last_grad: bool,
    inv_grad_scale: Tensor | None,
    skip_nonfinite: bool,
    clip: bool,
    one_buffer: bool,
) -> Tensor:
    """Both kernels over one (device, dtypes) group of non-empty tensors; returns the vector of
    their squared norms of ``c`` (of ``g`` under ``one_buffer``; zeros for plain AdamW)."""
    device = tensors.params[0].device
    param_dtype = tensors.params[0].dtype
    state_dtype = tensors.exp_avgs[0].dtype
    compute = torch.float64 if param_dtype == torch.float64 else torch.float32
    n = len(tensors)
    addresses = _held_for_graphs(
        _address_table(_address_rows(tensors, is_mars, hp.amsgrad), device)
    )
    numels = tuple([p.numel() for p in tensors.params])
    numel_table = _held_for_graphs(_numel_table(numels, device))
    coefficients = _coefficient_table(hp, scale, tensors.steps, rules, device)
    norm_sq = torch.zeros(n, dtype=torch.float64, device=device)
    scale_pointer = inv_grad_scale if inv_grad_scale is not None else norm_sq
    common = common_constexprs(
        tensors.grads[0].dtype, state_dtype, compute, inv_grad_scale is not None, hp.maximize
    )
    if is_mars and (clip or skip_nonfinite):
        span = BLOCK * NORM_CHUNKS_PER_PROGRAM
        norm_chunks = tuple(map(_held_for_graphs, _chunk_table(numels, span, device)))
        _mars_norm_kernel[(norm_chunks[0].numel(),)](
            addresses,
            numel_table,
            coefficients,
            *norm_chunks,
            norm_sq,
            scale_pointer,
            CHUNKS=NORM_CHUNKS_PER_PROGRAM,
            READS_LAST_G=not one_buffer,
            **common,
        )
    chunks = tuple(map(_held_for_graphs, _chunk_table(numels, BLOCK, device)))
    _mars_update_kernel[(chunks[0].numel(),)](
        addresses,
        numel_table,
        coefficients,
        *chunks,
        norm_sq,
        scale_pointer,
        **update_constexprs(
            common,
            param_dtype,
            is_mars,
            store_last_grad,
            hp.amsgrad,
            skip_nonfinite,
            clip,
            one_buffer,
        ),
    )
    return norm_sq


@functools.lru_cache(maxsize=64)
def _chunk_table(numels: tuple[int, ...], span: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """``(tensor index, start offset)`` of every ``span``-element chunk of every tensor, on
    ``device``. Cached: a model's sizes do not change between steps, and building the table
    (one entry per chunk, about 10^5 for GPT-2 small) costs milliseconds on the host."""
    tensor_ids: list[int] = []
    starts: list[int] = []
    for index, numel in enumerate(numels):
        offsets = range(0, numel, span)
        tensor_ids += [index] * len(offsets)
        starts += offsets
    return _to_device(tensor_ids, torch.int32, device), _to_device(starts, torch.int64, device)


@functools.lru_cache(maxsize=64)
def _numel_table(numels: tuple[int, ...], device: torch.device) -> Tensor:
    return _to_device(numels, torch.int64, device)


def triton_refusal(tensors: Sequence[Tensor | None], value_of: Callable[[str], Any]) -> str | None:
    """Why these kernels cannot run ``tensors`` (a step's parameters, gradients and state)
    under the settings ``value_of(name)`` gives, or None: a setting they do not implement
    (:func:`~torch_mars.optim.settings.unsupported`), or a tensor that is not contiguous (the
    flat indexing needs it). :func:`~torch_mars.optim.functional.fused_path` reads it to pick
    the compiled kernel instead, and these kernels to refuse a call that names them."""
    settings = unsupported("triton", value_of)
    if settings:
        return f"the settings {settings}"
    if not all([t.is_contiguous() for t in tensors if t is not None]):
        return "non-contiguous tensors"
    return None


def _check_runs_here(tensors: StepTensors, hp: MarsHyperparams | AdamWHyperparams) -> None:
    """Refuse what :func:`triton_refusal` names. ``fused=True`` never sends such a step here;
    only a call that names ``implementation="triton"`` can."""
    reason = triton_refusal(tensors.buffers(), hp.setting)
    if reason is not None:
        raise ValueError(
            f"implementation='triton' does not run {reason}: use implementation='fused', "
            "which takes the compiled kernel for them"
        )


def _launch_groups(
    tensors: StepTensors,
    hp: AdamWHyperparams,
    scale: object,
    rules: list[int],
    *,
    is_mars: bool,
    store_last_grad: bool,
    inv_grad_scale: Tensor | None,
    skip_nonfinite: bool = False,
    clip: bool = True,
    one_buffer: bool = False,
) -> list[Tensor] | None:
    """Launch the kernels per (device, dtypes) group. Under ``skip_nonfinite``, returns each
    tensor's gate (1 where ``||c||`` is finite; 1 for tensors with no elements): views of one
    vector per group, so the ops a step dispatches do not grow with the number of tensors;
    else None."""
    require_triton()
    gates: list[Tensor | None] | None = [None] * len(tensors) if skip_nonfinite else None
    keys = [
        (p.device, p.dtype, g.dtype, m.dtype)
        for p, g, m in zip(tensors.params, tensors.grads, tensors.exp_avgs, strict=True)
    ]
    for indices in group_indices(keys):
        nonempty = [i for i in indices if tensors.params[i].numel() > 0]
        if nonempty:
            norm_sq = _launch(
                tensors.select(nonempty),
                hp,
                scale,
                [rules[i] for i in nonempty],
                is_mars,
                store_last_grad,
                inv_grad_scale,
                skip_nonfinite,
                clip,
                one_buffer,
            )
            if gates is not None:
                dtype = tensors.params[nonempty[0]].dtype
                for i, gate in zip(nonempty, finite_gates(norm_sq, dtype).unbind(), strict=True):
                    gates[i] = gate
    if gates is None:
        return None
    return [tensors.params[i].new_ones(()) if g is None else g for i, g in enumerate(gates)]


def mars_elementwise_triton(
    tensors: StepTensors,
    hp: MarsHyperparams,
    store_last_grad: bool,
    inv_grad_scale: Tensor | None = None,
) -> list[Tensor] | None:
    """The element-wise part of a MARS step with the Triton kernels: everything but
    Newton-Schulz (see :func:`torch_mars.optim.functional.mars_step`). Returns each tensor's
    gate under ``hp.skip_nonfinite``, else None. Under ``hp.one_buffer`` the update kernel keeps
    the one buffer and writes each Newton-Schulz matrix's ``m_t`` into its ``last_grads`` slot.
    Contiguous tensors only, and not two options: cautious updates, which need each tensor's
    kept fraction before its update (these two passes do not have it), and the
    ``second_moment="gradient"`` ablation (``fused=True`` sends those to the compiled
    kernel)."""
    _check_runs_here(tensors, hp)
    code_of = {
        ndim: ELEMENTWISE_RULES.index(elementwise_rule(hp.mars_type, ndim))
        for ndim in {p.ndim for p in tensors.params}
    }
    return _launch_groups(
        tensors,
        hp,
        correction_scale(hp.gamma, hp.beta1),
        [code_of[p.ndim] for p in tensors.params],
        is_mars=True,
        store_last_grad=store_last_grad,
        inv_grad_scale=inv_grad_scale,
        skip_nonfinite=hp.skip_nonfinite,
        clip=hp.clip,
        one_buffer=hp.one_buffer,
    )


def adamw_step_triton(
    tensors: StepTensors, hp: AdamWHyperparams, inv_grad_scale: Tensor | None = None
) -> None:
    """One AdamW step with the Triton update kernel; see :func:`~.functional.adamw_step`.
    Contiguous tensors only."""
    _check_runs_here(tensors, hp)
    _launch_groups(
        tensors,
        hp,
        0.0,
        [ELEMENTWISE_RULES.index("adam")] * len(tensors),
        is_mars=False,
        store_last_grad=False,
        inv_grad_scale=inv_grad_scale,
    )
