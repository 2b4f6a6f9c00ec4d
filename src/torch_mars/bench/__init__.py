"""Benchmarks behind ``torch-mars bench``: the optimizer step alone (:mod:`.step`), whole
training iterations of the GPT harness (:mod:`.iteration`) and the step on FSDP2 shards
(:mod:`.distributed`); :mod:`.scripts` loads a benchmark script by its path, as the
repository's study scripts share their protocol."""
