"""Tune optimizers on a Hugging Face ``Trainer`` run: the trial's optimizer goes in through
``Trainer(optimizers=(optimizer, None))``. A tiny GPT-2 on a repeated token pattern.

    pip install transformers accelerate
    python examples/hf_trainer.py
"""

from __future__ import annotations

import tempfile

import torch
import transformers

import torch_mars

VOCAB, LENGTH, STEPS = 32, 16, 30


def sequences(seed: int, count: int) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, VOCAB, (count,), generator=generator)
    rows = [(start + torch.arange(LENGTH) * 3) % VOCAB for start in starts]
    return [{"input_ids": row, "labels": row} for row in rows]


def train(make_optimizer, seed: int, data_seed: int, report) -> float:
    transformers.set_seed(seed)
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=LENGTH, n_embd=32, n_layer=1, n_head=2,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(config)
    with tempfile.TemporaryDirectory() as output:
        args = transformers.TrainingArguments(
            output_dir=output,
            max_steps=STEPS,
            per_device_train_batch_size=8,
            data_seed=data_seed,
            seed=seed,
            lr_scheduler_type="constant",
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            use_cpu=True,
            disable_tqdm=True,
        )
        trainer = transformers.Trainer(
            model=model,
            args=args,
            train_dataset=sequences(1000, 256),
            eval_dataset=sequences(99, 64),
            optimizers=(make_optimizer(model), None),
        )
        trainer.train()
        loss = trainer.evaluate()["eval_loss"]
    report(STEPS, loss)
    return loss


if __name__ == "__main__":
    print(torch_mars.tune(train, optimizers=["adamw", "mars-adamw"], trials=10))
