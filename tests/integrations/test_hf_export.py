"""`torch-mars export-hf`: a trained run becomes a transformers GPT-2 folder whose logits equal
our GPT's, with a tokenizer that gives the ids the run was trained on (bytes, or GPT-2 BPE from
local files); bad inputs are clear errors that write nothing."""

from __future__ import annotations

import json

import pytest
import torch

from harness_helpers import SHARED_DATA, synthetic_corpus, tiny_config
from torch_mars.cli import main
from torch_mars.integrations.hf_export import (
    export_hf,
    gpt2_bpe_tokenizer,
    hf_gpt2_state_dict,
    load_run_model,
)
from torch_mars.train import Trainer
from torch_mars.train.checkpoint import CheckpointError

transformers = pytest.importorskip("transformers")
GPT2_FILES = SHARED_DATA / "tokenizers" / "gpt2"


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("export") / "run"
    Trainer(tiny_config(run_dir), synthetic_corpus()).train()
    return run_dir


def test_exported_model_gives_our_logits_after_reloading(trained_run, tmp_path):
    exported = export_hf(trained_run, tmp_path / "hf")
    assert exported.tokenizer == "bytes" and exported.max_logit_difference <= 1e-5
    assert (tmp_path / "hf" / "model.safetensors").is_file()
    ours, _ = load_run_model(trained_run)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    idx = torch.randint(
        256, (3, ours.config.block_size), generator=torch.Generator().manual_seed(1)
    )
    with torch.no_grad():
        expected, _ = ours(idx)
        actual = theirs(idx).logits
    torch.testing.assert_close(actual, expected, rtol=0, atol=1e-5)
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["n_positions"] == ours.config.block_size == 16
    assert config["activation_function"] == "gelu"


def test_byte_tokenizer_ids_are_the_utf8_bytes_and_decode_back(trained_run, tmp_path):
    export_hf(trained_run, tmp_path / "hf")
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    text = "def f(x):\n\treturn x ** 2  # ünïcödé ✓"
    ids = tokenizer(text).input_ids
    assert ids == list(text.encode())
    assert tokenizer.decode(ids) == text
    assert tokenizer.eos_token_id == tokenizer.bos_token_id == ord("\n")
    assert tokenizer.model_max_length == 16


def test_the_transposed_layout_is_gpt2s_conv1d():
    state = {
        "wte.weight": torch.zeros(5, 4),
        "blocks.0.mlp.c_fc.weight": torch.arange(32.0).reshape(8, 4),
        "blocks.0.ln_1.weight": torch.ones(4),
        "lm_head.weight": torch.zeros(5, 4),
    }
    mapped = hf_gpt2_state_dict(state)
    assert set(mapped) == {
        "transformer.wte.weight",
        "transformer.h.0.mlp.c_fc.weight",
        "transformer.h.0.ln_1.weight",
    }
    assert torch.equal(
        mapped["transformer.h.0.mlp.c_fc.weight"], state["blocks.0.mlp.c_fc.weight"].t()
    )


@pytest.mark.skipif(not (GPT2_FILES / "encoder.json").is_file(), reason="no GPT-2 BPE files")
def test_a_token_shard_run_gets_gpt2s_tokenizer_from_local_files(tmp_path):
    pytest.importorskip("tiktoken")
    from torch_mars.data import TokenCorpus
    from torch_mars.data.tokenizer import gpt2_tokenizer

    encoding = gpt2_tokenizer(GPT2_FILES)
    text = (SHARED_DATA / "text" / "tinyshakespeare.txt").read_text()[:20_000]
    tokens = torch.tensor(encoding.encode_ordinary(text)).numpy().astype("uint16")
    corpus = TokenCorpus(tokens[:4000], tokens[4000:], vocab_size=50257, name="shakespeare")
    run_dir = tmp_path / "run"
    Trainer(tiny_config(run_dir, data="shards:somewhere", steps=2), corpus).train()
    exported = export_hf(run_dir, tmp_path / "hf", tokenizer_dir=GPT2_FILES)
    assert exported.tokenizer == "gpt2"
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    sample = "First Citizen:\nBefore we proceed any further, hear me speak."
    assert tokenizer(sample).input_ids == encoding.encode_ordinary(sample)
    assert tokenizer.eos_token_id == 50256


def test_export_refuses_what_it_cannot_export_and_writes_nothing(trained_run, tmp_path):
    with pytest.raises(FileNotFoundError, match="run folder"):
        export_hf(tmp_path, tmp_path / "hf")
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "config.json").write_text(json.dumps({"task": "text", "model": "tiny"}))
    with pytest.raises(CheckpointError, match="no checkpoint"):
        export_hf(unfinished, tmp_path / "hf")
    assert main(["export-hf", str(tmp_path / "missing"), str(tmp_path / "hf")]) == 2
    assert not (tmp_path / "hf").exists()
    vision = tmp_path / "vision"
    vision.mkdir()
    (vision / "config.json").write_text(json.dumps({"task": "vision"}))
    with pytest.raises(ValueError, match="needs a text run"):
        export_hf(vision, tmp_path / "hf")
    with pytest.raises(FileNotFoundError, match=r"encoder\.json"):
        gpt2_bpe_tokenizer(16, tmp_path)
    assert not (tmp_path / "hf").exists()


def test_export_hf_command_writes_the_folder(trained_run, tmp_path, capsys):
    assert main(["export-hf", str(trained_run), str(tmp_path / "out")]) == 0
    assert "bytes tokenizer" in capsys.readouterr().out
    assert (tmp_path / "out" / "tokenizer.json").is_file()
