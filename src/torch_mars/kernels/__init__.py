"""Fused optimizer steps, called by :mod:`torch_mars.optim` when ``fused=True``: multi-tensor
Triton kernels on CUDA (:mod:`.triton_step`), one compiled kernel per tensor elsewhere
(:mod:`.compiled_step`)."""
