"""MARS inside the stacks users train with, run for real on CPU: transformers' Trainer (GPT-2 with
its Conv1D layers, through both helpers of torch_mars.integrations.huggingface), Lightning
(automatic optimization, and the exact mode through manual optimization) and accelerate. Each
is compared with the same training in a plain loop. Skipped where the framework is missing
(``pip install -e ".[test]"`` installs them)."""

from __future__ import annotations

import pytest
import torch

from torch_mars import MARS
from torch_mars.integrations.huggingface import mars_cls_and_kwargs, mars_for_trainer


def token_batches(count: int, batch: int = 4, length: int = 16, vocab: int = 32):
    """The same short sequence in every row: a model memorises it in a few steps."""
    return (torch.arange(length) * 7 % vocab).repeat(count * batch, 1)


def tiny_gpt2():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        vocab_size=32, n_positions=16, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config)


def trainer_for(model, tmp_path, **extra):
    transformers = pytest.importorskip("transformers")
    sequences = token_batches(10)
    dataset = [{"input_ids": s, "labels": s} for s in sequences]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=40,
        per_device_train_batch_size=4,
        learning_rate=1e-2,
        weight_decay=0.1,
        adam_beta1=0.9,
        adam_beta2=0.95,
        lr_scheduler_type="constant",
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        use_cpu=True,
        disable_tqdm=True,
    )
    return args, dataset, transformers


def test_hf_trainer_with_mars_for_trainer(tmp_path):
    model = tiny_gpt2()
    args, dataset, transformers = trainer_for(model, tmp_path)
    optimizer = mars_for_trainer(model, args, gamma=0.05)
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=dataset, optimizers=(optimizer, None)
    )
    trainer.train()
    assert getattr(trainer.optimizer, "optimizer", trainer.optimizer) is optimizer
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert sum(losses[-5:]) < 0.8 * sum(losses[:5])
    conv1d = [g for g in optimizer.param_groups if g.get("transposed_matrices")]
    assert conv1d and all(p.ndim == 2 for g in conv1d for p in g["params"])
    assert all(g["lr"] == 1e-2 and g["betas"] == (0.9, 0.95) for g in optimizer.param_groups)
    assert all(optimizer.state[p]["step"] == 40 for p in model.parameters())
    no_decay = [g for g in optimizer.param_groups if not g["use_mars"]]
    assert no_decay and all(g["weight_decay_1d"] == 0.0 for g in no_decay)


def test_hf_trainer_with_optimizer_cls_and_kwargs_forwards_the_arguments(tmp_path):
    model = tiny_gpt2()
    args, dataset, transformers = trainer_for(model, tmp_path)
    trainer = transformers.Trainer(
        model=model,
        args=args,
        train_dataset=dataset,
        optimizer_cls_and_kwargs=mars_cls_and_kwargs(args, gamma=0.05),
    )
    trainer.train()
    optimizer = (
        trainer.optimizer.optimizer
        if hasattr(trainer.optimizer, "optimizer")
        else trainer.optimizer
    )
    assert isinstance(optimizer, MARS)
    assert {g["lr"] for g in optimizer.param_groups} == {1e-2}
    decays = sorted(g["weight_decay_1d"] for g in optimizer.param_groups)
    assert decays == [0.0, 0.1]  # the Trainer's no-decay group decays its 1-D tensors by nothing
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert sum(losses[-5:]) < 0.8 * sum(losses[:5])


def test_the_exact_mode_is_refused_for_the_trainer(tmp_path):
    model = tiny_gpt2()
    args, _, _ = trainer_for(model, tmp_path)
    with pytest.raises(ValueError, match="without a closure"):
        mars_for_trainer(model, args, is_approx=False)


def small_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def regression_data():
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(6, 8, 8, generator=generator)
    return [(batch, batch.sum(dim=1, keepdim=True).sin()) for batch in x]


def plain_loop(is_approx: bool) -> list[torch.Tensor]:
    model = small_model()
    opt = MARS(model.parameters(), lr=1e-2, is_approx=is_approx, gamma=0.05)
    for x, y in regression_data():

        def closure(x=x, y=y):
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss

        if is_approx:
            opt.zero_grad()
            closure()
            opt.step()
        else:
            opt.step(closure)
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("is_approx", [True, False], ids=["approx", "exact"])
def test_lightning_matches_a_plain_loop(is_approx):
    lightning = pytest.importorskip("lightning")

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = small_model()
            self.automatic_optimization = is_approx

        def training_step(self, batch, index):
            x, y = batch
            if is_approx:
                return torch.nn.functional.mse_loss(self.net(x), y)
            opt = self.optimizers()

            def closure():
                loss = torch.nn.functional.mse_loss(self.net(x), y)
                self.manual_backward(loss)
                return loss

            opt.step(closure=closure)

        def configure_optimizers(self):
            return MARS(self.parameters(), lr=1e-2, is_approx=is_approx, gamma=0.05)

    module = Module()
    trainer = lightning.Trainer(
        max_epochs=1,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    loader = torch.utils.data.DataLoader(regression_data(), batch_size=None)
    trainer.fit(module, train_dataloaders=loader)
    for a, b in zip(plain_loop(is_approx), module.net.parameters(), strict=True):
        torch.testing.assert_close(b.detach(), a, rtol=0, atol=0)


def test_accelerate_matches_a_plain_loop():
    accelerate = pytest.importorskip("accelerate")
    accelerator = accelerate.Accelerator(cpu=True)
    model = small_model()
    opt = MARS(model.parameters(), lr=1e-2, gamma=0.05)
    model, opt = accelerator.prepare(model, opt)
    for x, y in regression_data():
        opt.zero_grad()
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        opt.step()
    for a, b in zip(plain_loop(True), model.parameters(), strict=True):
        torch.testing.assert_close(b.detach(), a, rtol=0, atol=0)
