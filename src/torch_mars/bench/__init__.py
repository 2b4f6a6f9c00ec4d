"""Benchmarks behind ``torch-mars bench``: the optimizer step alone (:mod:`.step`) and whole
training iterations of the GPT harness (:mod:`.iteration`)."""
