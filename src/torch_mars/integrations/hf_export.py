"""A trained torch-mars GPT as a Hugging Face ``transformers`` GPT-2 folder, for lm-eval and the
rest of the hub's tools.

Our GPT (:mod:`torch_mars.models.gpt`) is GPT-2 without biases and with exact GELU, so it maps
onto ``GPT2LMHeadModel`` one to one: the same names under ``transformer.`` (``blocks`` ->
``h``), each ``nn.Linear`` weight transposed into GPT-2's ``Conv1D`` (``(in, out)``) layout, every
GPT-2 bias zero, ``activation_function="gelu"`` and a tied output head. :func:`export_hf` checks
that the two models' logits agree before it writes anything.

The tokenizer goes with the model:

- runs on token shards (``--data shards:FOLDER``, GPT-2 BPE) get GPT-2's tokenizer, built from
  local ``encoder.json``/``vocab.bpe`` when ``tokenizer_dir`` is given, else fetched from the hub
  (``openai-community/gpt2``);
- byte-level runs (the stdlib corpus, text files) get a byte-level tokenizer whose id is the byte
  itself. Byte corpora have no separator token, so ``"\\n"`` (id 10) serves as the
  beginning/end-of-text token that lm-eval puts before an empty context.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from torch_mars.data.tokenizer import END_OF_TEXT, gpt2_byte_decoder
from torch_mars.models.gpt import GPT, GPT_CONFIGS, GPTConfig
from torch_mars.train.checkpoint import CHECKPOINT_FILE, load_checkpoint
from torch_mars.train.run_record import read_config

BYTE_TEXT_BOUNDARY = "\n"
GPT2_HUB_TOKENIZER = "openai-community/gpt2"
# float32 logits of the same weights through two implementations (SDPA in both, summed in a
# different order): the largest difference seen on the test models is about 1e-6.
LOGITS_TOLERANCE = 1e-4


@dataclass(frozen=True)
class ExportedModel:
    """What :func:`export_hf` wrote.

    Attributes:
        folder: the ``transformers`` folder (``config.json``, ``model.safetensors``, tokenizer).
        tokenizer: ``"gpt2"`` or ``"bytes"``.
        max_logit_difference: the largest ``|logit|`` difference between our GPT and the
            exported model on a random batch, in nats.
    """

    folder: Path
    tokenizer: str
    max_logit_difference: float


def _require_transformers() -> Any:
    """``transformers``, after checking that it and ``tokenizers`` import; an ``ImportError``
    naming the missing one and the extra that brings both otherwise."""
    try:
        import tokenizers  # noqa: F401
        import transformers
    except ImportError as error:
        raise ImportError(
            f"export-hf and eval need the eval extra ({error.name} is missing): "
            "pip install 'torch-mars[eval]'"
        ) from None
    return transformers


def gpt_config_from_state(state: dict[str, Tensor], model_name: str) -> GPTConfig:
    """The :class:`GPTConfig` of a saved GPT: vocabulary, context and width from the weights'
    shapes, the head count from the named config ``model_name``."""
    if model_name not in GPT_CONFIGS:
        raise ValueError(f"model must be one of {sorted(GPT_CONFIGS)}, got {model_name!r}")
    vocab_size, n_embd = state["wte.weight"].shape
    block_size = state["wpe.weight"].shape[0]
    n_layer = len({key.split(".")[1] for key in state if key.startswith("blocks.")})
    return GPTConfig(n_layer, GPT_CONFIGS[model_name].n_head, n_embd, block_size, vocab_size)


def hf_gpt2_config(config: GPTConfig, boundary_token_id: int) -> Any:
    """``transformers.GPT2Config`` of the same architecture (dropout 0, exact GELU, tied head);
    ``boundary_token_id`` is its beginning- and end-of-text token."""
    transformers = _require_transformers()
    return transformers.GPT2Config(
        vocab_size=config.vocab_size,
        n_positions=config.block_size,
        n_embd=config.n_embd,
        n_layer=config.n_layer,
        n_head=config.n_head,
        activation_function="gelu",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=1e-5,
        tie_word_embeddings=True,
        bos_token_id=boundary_token_id,
        eos_token_id=boundary_token_id,
    )


def hf_gpt2_state_dict(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Our GPT's weights under ``GPT2LMHeadModel``'s names, in its layout: ``blocks.i.`` ->
    ``transformer.h.i.``, ``nn.Linear`` weights ``(out, in)`` transposed to ``Conv1D``'s
    ``(in, out)``. The tied ``lm_head.weight`` is left out (it is ``wte.weight``)."""
    mapped = {}
    for name, tensor in state.items():
        if name == "lm_head.weight":
            continue
        linear = tensor.ndim == 2 and not name.startswith(("wte.", "wpe."))
        hf_name = "transformer." + name.replace("blocks.", "h.", 1)
        mapped[hf_name] = tensor.t().contiguous() if linear else tensor
    return mapped


def _byte_level_tokenizer(model: Any, boundary: str, block_size: int, use_regex: bool) -> Any:
    """A ``PreTrainedTokenizerFast`` over a BPE ``model`` with GPT-2's byte-level pre-tokenizer
    and decoder, ``boundary`` as its beginning/end-of-text token."""
    transformers = _require_transformers()
    from tokenizers import Tokenizer, decoders, pre_tokenizers

    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=use_regex)
    tokenizer.decoder = decoders.ByteLevel()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=boundary,
        eos_token=boundary,
        model_max_length=block_size,
    )


def byte_level_tokenizer(block_size: int) -> Any:
    """A tokenizer whose ids are the UTF-8 bytes of the text (vocab 256), with ``"\\n"`` as its
    beginning/end-of-text token."""
    from tokenizers import models

    vocab = gpt2_byte_decoder()  # GPT-2's printable stand-in character of each byte -> the byte
    newline = next(c for c, b in vocab.items() if b == ord(BYTE_TEXT_BOUNDARY))
    return _byte_level_tokenizer(models.BPE(vocab, []), newline, block_size, use_regex=False)


def gpt2_bpe_tokenizer(block_size: int, tokenizer_dir: Path | None) -> Any:
    """GPT-2's tokenizer (``<|endoftext|>`` = 50256): from ``tokenizer_dir/encoder.json`` and
    ``vocab.bpe`` when given (no download), else from the hub."""
    if tokenizer_dir is None:
        return _require_transformers().AutoTokenizer.from_pretrained(
            GPT2_HUB_TOKENIZER, model_max_length=block_size
        )
    from tokenizers import models

    files = [Path(tokenizer_dir) / name for name in ("encoder.json", "vocab.bpe")]
    for path in files:
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file (GPT-2's encoder.json and vocab.bpe)")
    model = models.BPE.from_file(str(files[0]), str(files[1]))
    return _byte_level_tokenizer(model, END_OF_TEXT, block_size, use_regex=True)


def load_run_model(run_dir: Path) -> tuple[GPT, dict[str, Any]]:
    """The GPT of a text run's final ``checkpoint.pt``, and the run's ``config.json``."""
    config = read_config(run_dir)
    if config.get("task") != "text":
        raise ValueError(f"{run_dir}: export needs a text run (a GPT), not {config.get('task')!r}")
    payload = load_checkpoint(run_dir / CHECKPOINT_FILE, identity={})
    if "model" not in payload:
        raise ValueError(
            f"{run_dir}: the checkpoint is sharded (an --fsdp run); resume it once without "
            "--fsdp to write a single-file checkpoint, then export"
        )
    state = payload["model"]
    model = GPT(gpt_config_from_state(state, config["model"]))
    model.load_state_dict(state)
    return model.eval(), config


def max_logit_difference(ours: GPT, theirs: Any, seed: int = 0) -> float:
    """The largest ``|logit|`` difference of the two models on 2 random full-length rows."""
    config = ours.config
    generator = torch.Generator().manual_seed(seed)
    idx = torch.randint(config.vocab_size, (2, config.block_size), generator=generator)
    with torch.no_grad():
        expected, _ = ours(idx)
        actual = theirs(idx).logits
    return float((expected - actual).abs().max())


def export_hf(
    run_dir: str | Path, out: str | Path, tokenizer_dir: Path | None = None
) -> ExportedModel:
    """Write the GPT of ``run_dir`` as a ``transformers`` GPT-2 folder ``out`` (safetensors,
    config and tokenizer), after checking that its logits equal ours to
    :data:`LOGITS_TOLERANCE`.

    Raises:
        ValueError: not a text run, a sharded checkpoint, or logits that disagree.
        CheckpointError: no readable checkpoint in ``run_dir``.
    """
    _require_transformers()  # before any work: without it the export cannot end
    run_dir, out = Path(run_dir), Path(out)
    model, run_config = load_run_model(run_dir)
    block_size = model.config.block_size
    if str(run_config.get("data", "")).startswith("shards:"):
        kind, tokenizer = "gpt2", gpt2_bpe_tokenizer(block_size, tokenizer_dir)
    else:
        kind, tokenizer = "bytes", byte_level_tokenizer(block_size)
    transformers = _require_transformers()
    hf_model = transformers.GPT2LMHeadModel(hf_gpt2_config(model.config, tokenizer.eos_token_id))
    weights = hf_gpt2_state_dict(model.state_dict())
    with torch.no_grad():
        for name, parameter in hf_model.named_parameters():
            if name in weights:
                parameter.copy_(weights.pop(name))
            elif name.endswith(".bias"):
                parameter.zero_()
            else:
                raise ValueError(f"GPT2LMHeadModel's {name} has no counterpart in our GPT")
    if weights:
        raise ValueError(f"weights with no place in GPT2LMHeadModel: {sorted(weights)}")
    hf_model.eval()
    difference = max_logit_difference(model, hf_model)
    if not difference <= LOGITS_TOLERANCE:
        raise ValueError(
            f"the exported model's logits differ from ours by {difference:.3g} "
            f"(tolerance {LOGITS_TOLERANCE:g}); nothing was written"
        )
    out.mkdir(parents=True, exist_ok=True)
    hf_model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return ExportedModel(out, kind, difference)
