"""The GPT is nanoGPT's shape: named sizes, tied embeddings, causal attention, sane init."""

from __future__ import annotations

import math

import pytest
import torch

from torch_mars.models import GPT, GPT_CONFIGS, GPTConfig, gpt_config

# Non-embedding parameter counts of GPT-2 with vocab 50304 (nanoGPT reports 123.59M for small).
PAPER_SIZES = {"gpt2-small": 124e6, "gpt2-medium": 354e6, "gpt2-large": 773e6, "gpt2-xl": 1557e6}


@pytest.mark.parametrize("name", sorted(PAPER_SIZES))
def test_paper_configs_have_gpt2_sizes(name):
    config = GPT_CONFIGS[name]
    assert (config.block_size, config.vocab_size) == (1024, 50304)
    with torch.device("meta"):
        model = GPT(gpt_config(name, 50257))
    assert model.num_parameters() == pytest.approx(PAPER_SIZES[name], rel=0.01)


@pytest.mark.parametrize("name", ["tiny", "mini"])
def test_cpu_configs_take_the_vocabulary_of_the_data(name):
    model = GPT(gpt_config(name, 256))
    idx, targets = torch.randint(0, 256, (2, 2, model.config.block_size))
    logits, loss = model(idx, targets)
    assert logits.shape == (2, model.config.block_size, 256)
    assert loss.item() == pytest.approx(math.log(256), rel=0.05)


def test_output_head_is_tied_to_the_token_embedding():
    model = GPT(gpt_config("tiny", 256))
    assert model.lm_head.weight is model.wte.weight
    assert all(
        not hasattr(m, "bias") or m.bias is None
        for m in model.modules()
        if isinstance(m, (torch.nn.Linear, torch.nn.LayerNorm))
    )


def test_attention_is_causal():
    torch.manual_seed(0)
    model = GPT(gpt_config("tiny", 256))
    idx = torch.randint(0, 256, (1, 10))
    changed = idx.clone()
    changed[0, 6:] = (changed[0, 6:] + 1) % 256
    before, _ = model(idx)
    after, _ = model(changed)
    torch.testing.assert_close(before[0, :6], after[0, :6])
    assert not torch.allclose(before[0, 6:], after[0, 6:])


def test_bad_sizes_are_rejected():
    with pytest.raises(ValueError, match="multiple of n_head"):
        GPTConfig(n_layer=1, n_head=3, n_embd=8, block_size=4)
    with pytest.raises(ValueError, match="model must be one of"):
        gpt_config("gpt5", 256)
    with pytest.raises(ValueError, match="smaller than the data"):
        gpt_config("gpt2-small", 60000)
    model = GPT(gpt_config("tiny", 256))
    with pytest.raises(ValueError, match="exceeds block_size"):
        model(torch.zeros(1, 33, dtype=torch.long))
