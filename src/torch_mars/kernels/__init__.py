"""Fused optimizer steps, called by :mod:`torch_mars.optim` when ``fused=True``: multi-tensor
Triton kernels on CUDA (:mod:`.triton_step`), one compiled kernel per tensor elsewhere
(:mod:`.compiled_step`)."""

import importlib.util

TRITON_AVAILABLE = importlib.util.find_spec("triton") is not None


def require_triton() -> None:
    """Raise a clear error when the Triton kernels are asked for but Triton is not installed."""
    if not TRITON_AVAILABLE:
        raise RuntimeError(
            "fused=True on CUDA needs Triton: pip install 'torch-mars[triton]' (or use "
            "foreach=True)"
        )
