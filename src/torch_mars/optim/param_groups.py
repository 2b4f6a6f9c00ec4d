"""``mars_param_groups``: split a model's parameters into a MARS group and a 1-D AdamW group."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any, Literal

from torch import nn

NORM_MODULE_TYPES: tuple[type[nn.Module], ...] = (
    nn.LayerNorm,
    nn.GroupNorm,
    nn.RMSNorm,
    nn.LocalResponseNorm,
    nn.modules.batchnorm._NormBase,  # every BatchNorm and InstanceNorm
)
EMBEDDING_MODULE_TYPES: tuple[type[nn.Module], ...] = (nn.Embedding, nn.EmbeddingBag)


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatchcase(name, pattern) for pattern in patterns)


def _takes_mars(
    name: str,
    param: nn.Parameter,
    owner: nn.Module,
    embeddings: str,
    adamw_module_types: tuple[type[nn.Module], ...],
    mars_names: Sequence[str],
    adamw_names: Sequence[str],
) -> bool:
    to_mars, to_adamw = _matches(name, mars_names), _matches(name, adamw_names)
    if to_mars and to_adamw:
        raise ValueError(f"parameter {name!r} matches both mars_names and adamw_names")
    if to_mars or to_adamw:
        return to_mars
    if isinstance(owner, adamw_module_types):
        return False
    if isinstance(owner, EMBEDDING_MODULE_TYPES):
        return embeddings == "mars"
    if name.rsplit(".", 1)[-1] == "bias":
        return False
    return param.ndim >= 2


def stores_in_out(module: nn.Module) -> bool:
    """Whether ``module`` keeps its weight as ``(in, out)``: transformers' ``Conv1D`` (GPT-2),
    recognised by its class, without importing transformers."""
    kind = type(module)
    return kind.__name__ == "Conv1D" and kind.__module__.startswith("transformers")


def mars_param_groups(
    model: nn.Module,
    *,
    embeddings: Literal["mars", "adamw"] = "mars",
    adamw_module_types: tuple[type[nn.Module], ...] = NORM_MODULE_TYPES,
    mars_names: Sequence[str] = (),
    adamw_names: Sequence[str] = (),
    mars_options: Mapping[str, Any] | None = None,
    adamw_options: Mapping[str, Any] | None = None,
    named: bool = False,
) -> list[dict[str, Any]]:
    """Param groups for :class:`~torch_mars.MARS` that say for every parameter which rule it takes.

    Each parameter of ``model`` lands in exactly one group (shared parameters once, under the
    first module that owns them; frozen ones too, which the optimizer skips while they have no
    gradient). The first rule that applies decides:

    1. its qualified name matches a glob in ``mars_names`` (MARS) or ``adamw_names`` (AdamW);
       matching both is a ``ValueError``;
    2. its module is an instance of ``adamw_module_types`` (default: every norm layer): AdamW;
    3. its module is an ``nn.Embedding``/``nn.EmbeddingBag``: MARS if ``embeddings == "mars"``
       (what the paper ran on GPT-2, whose output head shares the token embedding), else AdamW;
    4. it is a ``bias``: AdamW;
    5. ``ndim >= 2`` (linear and conv weights): MARS; anything else: AdamW.

    Args:
        model: the module whose parameters are grouped.
        embeddings: where embedding tables go, ``"mars"`` or ``"adamw"``.
        adamw_module_types: module types whose own parameters all take AdamW.
        mars_names, adamw_names: ``fnmatch`` globs over names from ``model.named_parameters()``.
        mars_options, adamw_options: extra keys for each group (``lr``, ``weight_decay``, ...).
        named: put ``(name, parameter)`` pairs in the groups instead of bare parameters, so that
            the optimizer keeps the names (``param_names`` in its groups and state dict).

    Matrices of transformers' ``Conv1D`` modules (GPT-2 in Hugging Face ``transformers``), which
    store their weight as ``(in, out)``, go to a third group with ``transposed_matrices=True``, so
    that MARS-Shampoo scales them as the ``nn.Linear`` they stand for.

    Returns:
        Up to three groups: ``{"params": [...], "use_mars": True, **mars_options}``, the same
        with ``"transposed_matrices": True`` for ``Conv1D`` weights, and
        ``{"params": [...], "use_mars": False, **adamw_options}``; an empty one is left out.

    >>> model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 4), nn.LayerNorm(4))
    >>> [(g["use_mars"], len(g["params"])) for g in mars_param_groups(model)]
    [(True, 2), (False, 3)]
    """
    if embeddings not in ("mars", "adamw"):
        raise ValueError(f"embeddings must be 'mars' or 'adamw', got {embeddings!r}")
    for key, options in (("mars_options", mars_options), ("adamw_options", adamw_options)):
        if options and ("params" in options or "use_mars" in options):
            raise ValueError(f"{key} may not set 'params' or 'use_mars'")
    mars_params: list[Any] = []
    transposed_params: list[Any] = []
    adamw_params: list[Any] = []
    seen: set[int] = set()
    for module_name, module in model.named_modules():
        for param_name, param in module.named_parameters(recurse=False):
            if id(param) in seen:
                continue
            seen.add(id(param))
            name = f"{module_name}.{param_name}" if module_name else param_name
            takes_mars = _takes_mars(
                name, param, module, embeddings, adamw_module_types, mars_names, adamw_names
            )
            entry = (name, param) if named else param
            if not takes_mars:
                adamw_params.append(entry)
            elif param.ndim == 2 and stores_in_out(module):
                transposed_params.append(entry)
            else:
                mars_params.append(entry)
    groups = [
        {"params": mars_params, "use_mars": True, **(mars_options or {})},
        {
            "params": transposed_params,
            "use_mars": True,
            "transposed_matrices": True,
            **(mars_options or {}),
        },
        {"params": adamw_params, "use_mars": False, **(adamw_options or {})},
    ]
    return [group for group in groups if group["params"]]
