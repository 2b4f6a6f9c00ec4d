"""Helpers that fit MARS into other training stacks. Each module imports only ``torch_mars.optim``
and never the framework it serves, so nothing here needs that framework installed:
:mod:`.huggingface` (``transformers``' ``Trainer``). Lightning, accelerate and timm need no
helper; docs/integrations.md has their recipes."""
