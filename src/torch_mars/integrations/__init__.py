"""Adapters that fit MARS and the harness's models into other stacks. None imports the stack
it serves at import time, so nothing here needs it installed until used:

- :mod:`.huggingface`: MARS for ``transformers``' ``Trainer``, built from its arguments;
- :mod:`.timm_registry`: MARS under ``torchmars-*`` names in timm's optimizer registry;
- :mod:`.hf_export`: a trained harness GPT as a ``transformers`` GPT-2 folder;
- :mod:`.lm_evaluation`: that folder scored by lm-eval.

Lightning and accelerate need no helper; docs/integrations.md has their recipes."""
