"""Every setting of a MARS param group, declared once: its default, its check, whether the
step plan derives from it, and the values that a fused backend cannot run. From this table
come ``MARS``'s defaults and ``__setstate__``, :func:`validate_group`, the hyperparameter
dataclasses' defaults, :data:`PLANNED_SETTINGS`, the fused backends' capability check
(:func:`unsupported`: the Triton reroute, the default fused choice and ``cuda_graph``'s
conflicts) and the parity tests' list of variants. Nothing else writes a setting's default.

This module imports only torch; every other module of ``torch_mars.optim`` may import it.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

Scalar = float | Tensor
MarsType = Literal["mars-adamw", "mars-lion", "mars-shampoo", "mars-m"]
MARS_TYPES: tuple[str, ...] = ("mars-adamw", "mars-lion", "mars-shampoo", "mars-m")
# What the Adam rule's second moment ``v`` of a MARS-routed tensor averages: the corrected
# gradient ``c`` (the paper's) or the gradient ``g`` (an ablation).
SecondMoment = Literal["corrected", "gradient"]
SECOND_MOMENTS: tuple[str, ...] = ("corrected", "gradient")
STATE_DTYPES: tuple[torch.dtype | None, ...] = (None, torch.float32, torch.bfloat16)
NS_DTYPES: tuple[torch.dtype | None, ...] = (None, torch.bfloat16, torch.float32, torch.float64)
NS_ITERATIONS: tuple[str, ...] = ("quintic", "gram", "polar-express")
# How Newton-Schulz multiplies: torch's dense matmuls, or (CUDA, Triton) its two symmetric
# products one triangle of tiles at a time (torch_mars.kernels.triton_symmetric).
NS_PRODUCTS: tuple[str, ...] = ("dense", "triangle")
# The backends a setting's value may need another path than: the multi-tensor Triton kernels,
# and a step captured in a CUDA graph (those kernels, in the approximate mode).
BACKENDS: tuple[str, ...] = ("triton", "cuda_graph")


def _check_tensor_scalar(name: str, value: Tensor, allowed: str) -> float | None:
    """Check a tensor hyperparameter's shape and dtype; return its value only if it is on the CPU
    (reading a device tensor would synchronise the host with the device)."""
    if value.numel() != 1 or not value.is_floating_point() or value.requires_grad:
        raise ValueError(
            f"{name} must be a float or a one-element floating tensor without grad ({allowed}), "
            f"got a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
        )
    return float(value) if value.device.type == "cpu" else None


def _nonnegative(name: str, value: Any, tensor_ok: bool = False) -> None:
    if tensor_ok and isinstance(value, Tensor):
        value = _check_tensor_scalar(name, value, "finite, >= 0")
        if value is None:
            return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if not (math.isfinite(value) and value >= 0.0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def _nonnegative_or_tensor(name: str, value: Any) -> None:
    _nonnegative(name, value, tensor_ok=True)


def _ns_products(name: str, value: Any) -> None:
    if value not in NS_PRODUCTS:
        raise ValueError(f"{name} must be one of {NS_PRODUCTS}, got {value!r}")
    if value == "triangle" and importlib.util.find_spec("triton") is None:
        raise ValueError(
            f"{name}='triangle' runs a Triton kernel: pip install 'torch-mars[triton]', or "
            "keep ns_products='dense'"
        )


def _nonnegative_or_none(name: str, value: Any) -> None:
    if value is not None:  # None: the group's lr, resolved when the group is added
        _nonnegative(name, value)


def _betas(name: str, value: Any) -> None:
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise ValueError(f"{name} must be a pair (beta1, beta2) with each in [0, 1), got {value!r}")
    for index, beta in enumerate(value):
        if isinstance(beta, Tensor):
            beta = _check_tensor_scalar(f"{name}[{index}]", beta, "in [0, 1)")
            if beta is None:
                continue
        if isinstance(beta, bool) or not isinstance(beta, int | float) or not (0.0 <= beta < 1.0):
            raise ValueError(f"{name}[{index}] must be in [0, 1), got {beta!r}")


def _flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")


def _flag_or_none(name: str, value: Any) -> None:
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"{name} must be True, False or None, got {value!r}")


def _one_of(allowed: tuple[Any, ...], said: str = "") -> Callable[[str, Any], None]:
    """A check that the value is one of ``allowed`` (``said``: how the error lists them)."""

    def check(name: str, value: Any) -> None:
        if value not in allowed:
            raise ValueError(f"{name} must be {said or f'one of {allowed}'}, got {value!r}")

    return check


def _ns_steps(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100:
        raise ValueError(f"{name} must be an integer in [1, 100], got {value!r}")


@dataclass(frozen=True)
class Setting:
    """One param-group setting.

    Attributes:
        name: its key in a param group (and ``MARS``'s keyword).
        default: its value when not given.
        check: raises a ``ValueError`` naming the setting when a value is out of range.
        planned: the step plan derives from it (:mod:`.step_plan` rebuilds a plan when it
            changes).
        needs_other_path: per backend of :data:`BACKENDS`, which values that backend cannot
            run (a predicate); the setting runs everywhere when a backend is absent.
        variant: a non-default value that the parity tests step every path with (None: the
            setting selects a path or a range, and other tests cover it).
        first_release: every MARS param group has had it since the first release, so a state
            dict whose groups lack it was written by another optimizer.
    """

    name: str
    default: Any
    check: Callable[[str, Any], None]
    planned: bool = False
    needs_other_path: Mapping[str, Callable[[Any], bool]] = field(default_factory=dict)
    variant: Any = None
    first_release: bool = False


SETTINGS: tuple[Setting, ...] = (
    Setting("lr", 3e-3, _nonnegative_or_tensor, first_release=True),
    Setting("betas", (0.95, 0.99), _betas, first_release=True),
    Setting("eps", 1e-8, _nonnegative, first_release=True),
    Setting("weight_decay", 0.0, _nonnegative, variant=0.1, first_release=True),
    Setting("amsgrad", False, _flag, planned=True, variant=True),
    Setting("gamma", 0.025, _nonnegative_or_tensor, first_release=True),
    Setting(
        "is_approx",
        True,
        _flag,
        planned=True,
        needs_other_path={"cuda_graph": lambda approx: not approx},
        variant=False,
        first_release=True,
    ),
    Setting("mars_type", "mars-adamw", _one_of(MARS_TYPES), planned=True, first_release=True),
    Setting("optimize_1d", False, _flag, planned=True, variant=True, first_release=True),
    Setting("reference_routing", False, _flag, planned=True, variant=True),
    Setting("lr_1d", None, _nonnegative_or_none, first_release=True),
    Setting("betas_1d", (0.9, 0.95), _betas, first_release=True),
    Setting("weight_decay_1d", 0.1, _nonnegative, first_release=True),
    Setting("maximize", False, _flag, variant=True),
    Setting("ns_steps", 5, _ns_steps),
    Setting(
        "ns_dtype",
        None,
        _one_of(
            NS_DTYPES,
            "None (bf16 where the device multiplies it fast, else float32), torch.float64 (for "
            "float64 references), torch.bfloat16 or torch.float32",
        ),
    ),
    Setting("ns_iteration", "quintic", _one_of(NS_ITERATIONS), variant="gram"),
    Setting("ns_products", "dense", _ns_products),
    Setting(
        "foreach",
        None,
        _flag_or_none,
        planned=True,
        needs_other_path={"cuda_graph": lambda foreach: bool(foreach)},
    ),
    Setting(
        "fused",
        None,
        _flag_or_none,
        planned=True,
        needs_other_path={"cuda_graph": lambda fused: fused is False},
    ),
    Setting(
        "state_dtype",
        None,
        _one_of(STATE_DTYPES, "None (the parameter's dtype), torch.float32 or torch.bfloat16"),
        planned=True,
    ),
    Setting("use_mars", None, _flag_or_none, planned=True),
    Setting("transposed_matrices", False, _flag, variant=True),
    Setting("skip_nonfinite", True, _flag, planned=True, variant=False),
    Setting("clip", True, _flag, variant=False),
    Setting(
        "one_buffer",
        False,
        _flag,
        planned=True,
        needs_other_path={"cuda_graph": bool},
    ),
    Setting(
        "cautious",
        False,
        _flag,
        planned=True,
        needs_other_path={"triton": bool, "cuda_graph": bool},
        variant=True,
    ),
    Setting(
        "second_moment",
        "corrected",
        _one_of(SECOND_MOMENTS),
        planned=True,
        needs_other_path={
            "triton": lambda moment: moment != "corrected",
            "cuda_graph": lambda moment: moment != "corrected",
        },
        variant="gradient",
    ),
    Setting("cuda_graph", False, _flag, planned=True),
)
SETTING_OF: dict[str, Setting] = {s.name: s for s in SETTINGS}
DEFAULTS: dict[str, Any] = {s.name: s.default for s in SETTINGS}
FIRST_RELEASE_SETTINGS: tuple[str, ...] = tuple(s.name for s in SETTINGS if s.first_release)
PLANNED_SETTINGS: tuple[str, ...] = tuple(s.name for s in SETTINGS if s.planned)


def unsupported(backend: str, value_of: Callable[[str], Any]) -> list[str]:
    """The settings whose values (``value_of(name)``) ``backend`` cannot run, in table order."""
    return [
        s.name
        for s in SETTINGS
        if backend in s.needs_other_path and s.needs_other_path[backend](value_of(s.name))
    ]


def validate_group(group: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the first setting of ``group`` outside its range, then the
    first combination of settings that cannot run together.

    ``group`` is a complete param-group dict (defaults filled in). Nothing is modified.
    """
    for setting in SETTINGS:
        setting.check(setting.name, group[setting.name])
    if group["second_moment"] != "corrected" and group["mars_type"] == "mars-lion":
        raise ValueError(
            "second_moment='gradient' needs a rule with a second moment (mars-adamw, or the "
            "1-D tensors of mars-shampoo and mars-m under optimize_1d); mars-lion has none"
        )
    if group["one_buffer"]:
        if group["mars_type"] == "mars-adamw" or not group["is_approx"] or group["clip"]:
            raise ValueError(
                "one_buffer needs is_approx=True, clip=False and a momentum-only rule "
                "(mars-lion, mars-shampoo, mars-m): it rebuilds the unclipped c from g and "
                f"one buffer, got mars_type={group['mars_type']!r}, is_approx="
                f"{group['is_approx']}, clip={group['clip']}"
            )
        beta1 = group["betas"][0]
        if not isinstance(beta1, Tensor) and beta1 == 0.0:
            raise ValueError("one_buffer needs betas[0] > 0 (its buffer is scaled by 1/beta1)")
    if group["foreach"] and group["fused"]:
        raise ValueError("foreach and fused cannot both be True: pick one implementation")
    if group["cuda_graph"]:
        conflicts = unsupported("cuda_graph", group.__getitem__)
        if conflicts:
            raise ValueError(
                "cuda_graph=True runs the multi-tensor Triton kernels (fused=True or None, on "
                "CUDA) in the approximate mode, without one_buffer, cautious or "
                f"second_moment='gradient'; it conflicts with {conflicts}"
            )
