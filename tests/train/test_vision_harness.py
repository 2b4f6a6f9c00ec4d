"""The vision harness: `train-vision` and `compare-vision` end to end on tiny generated image sets
(metrics per epoch, run record, table, figure, and `plot` redrawing it), learning on an easy
task, the multistep schedule, MARS's conv routing (default and reference), and the CLI's
one-line errors."""

from __future__ import annotations

import csv
import gzip
import json
import struct

import numpy as np
import pytest
from PIL import Image

from torch_mars.cli import main
from torch_mars.models.resnet import resnet18
from torch_mars.optim import MARS, routes_to_mars
from torch_mars.train.optimizers import build_optimizer
from torch_mars.train.vision import VisionConfig, VisionTrainer, vision_hyperparams


def build_vision_optimizer(name, model, overrides):
    return build_optimizer(name, model, vision_hyperparams(name, overrides)).optimizer


TINY = ["--width", "2", "--epochs", "2", "--batch-size", "8", "--device", "cpu"]


def write_easy_folder(root, per_class: int = 12) -> None:
    """Two classes told apart by brightness: dark and bright 8x8 RGB images."""
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for label, name in enumerate(("dark", "bright")):
            (root / split / name).mkdir(parents=True)
            for i in range(per_class):
                base = 40 if label == 0 else 215
                pixels = np.clip(base + rng.normal(0, 20, (8, 8, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(root / split / name / f"{i}.png")


def write_tiny_idx(folder, n: int = 16) -> None:
    rng = np.random.default_rng(1)
    for split in ("train", "t10k"):
        images = rng.integers(0, 256, (n, 28, 28)).astype(np.uint8)
        header = struct.pack(">IIII", 2051, n, 28, 28)
        (folder / f"{split}-images-idx3-ubyte.gz").write_bytes(
            gzip.compress(header + images.tobytes())
        )
        labels = (np.arange(n) % 10).astype(np.uint8)
        (folder / f"{split}-labels-idx1-ubyte.gz").write_bytes(
            gzip.compress(struct.pack(">II", 2049, n) + labels.tobytes())
        )


def test_train_vision_learns_an_easy_task_and_logs_every_epoch(tmp_path, capsys):
    # Enough steps (10 per epoch) for batch norm's running statistics, which the test uses.
    write_easy_folder(tmp_path / "data", per_class=40)
    run_dir = tmp_path / "run"
    args = ["train-vision", "--data", f"folder:{tmp_path / 'data'}", *TINY, "--quiet"]
    args += ["--epochs", "4", "--no-augment", "--opt-arg", "lr=0.01", "--run-dir", str(run_dir)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "final validation accuracy" in printed
    assert printed.count(", test ") == 1  # the test split read once, after the last epoch
    with (run_dir / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows] == [1, 2, 3, 4]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["final"] >= 0.9 and summary["metric"] == "val_accuracy"
    assert json.loads((run_dir / "config.json").read_text())["optimizer"] == "mars-adamw"


def test_compare_vision_writes_table_figure_and_summary(tmp_path, capsys):
    write_tiny_idx(tmp_path)
    out = tmp_path / "runs"
    args = ["compare-vision", "--data", f"fashion-mnist:{tmp_path}", *TINY]
    args += ["--out-dir", str(out), "--name", "cmp", "--quiet", "--lr", "adamw=0.003"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    header = (
        "| optimizer | seeds | final validation accuracy | best validation accuracy | "
        "test accuracy (read once) | images |"
    )
    assert header in printed
    for name in ("mars-adamw", "adamw", "muon-nd"):
        assert f"| {name} |" in printed
        assert (out / "cmp" / f"{name}-seed0" / "metrics.jsonl").is_file()
    assert (out / "cmp" / "curves.png").stat().st_size > 0
    rows = json.loads((out / "cmp" / "summary.json").read_text())
    assert {row["optimizer"] for row in rows} == {"mars-adamw", "adamw", "muon-nd"}
    for row in rows:  # the test column is the run's one test read, after its last epoch
        last = json.loads((out / "cmp" / f"{row['optimizer']}-seed0" / "metrics.jsonl")
                          .read_text().splitlines()[-1])  # fmt: skip
        assert row["test"] == last["test_accuracy"]
        assert f"| {row['optimizer']} | 1 | " in printed
        assert f"| {100 * row['test']:.2f}% |" in printed
    config = json.loads((out / "cmp" / "adamw-seed0" / "config.json").read_text())
    assert config["task"] == "vision" and config["hyperparams"]["lr"] == 0.003

    (out / "cmp" / "curves.png").unlink()
    assert main(["plot", str(out / "cmp")]) == 0
    assert (out / "cmp" / "curves.png").stat().st_size > 10_000


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["compare-vision", "--data", "x:y", "--optimizers", "sgd"], "unknown"),
        (["train-vision", "--data", "pets:/nowhere"], "data must be KIND:PATH"),
        (["train-vision", "--data", "folder:/nowhere"], "no such folder"),
    ],
)
def test_cli_errors_are_one_line(capsys, args, message):
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_unknown_hyperparameters_are_value_errors_naming_the_optimizer():
    with pytest.raises(ValueError, match=r"adamw: .*unexpected keyword argument 'rho'"):
        build_vision_optimizer("adamw", resnet18(width=2), {"rho": 1})
    with pytest.raises(ValueError, match=r"mars-adamw: .*unexpected keyword argument 'rho'"):
        build_vision_optimizer("mars-adamw", resnet18(width=2), {"rho": 1})


def test_mars_routes_conv_kernels_by_default_and_not_under_reference_routing():
    model = resnet18(width=2)
    conv = model.stem.weight
    default = build_vision_optimizer("mars-adamw", model, {})
    reference = build_vision_optimizer("mars-adamw", model, {"reference_routing": True})
    assert routes_to_mars(conv, default.param_groups[0])
    assert not routes_to_mars(conv, reference.param_groups[0])
    assert routes_to_mars(model.head.weight, reference.param_groups[0])


def test_muon_nd_is_newton_schulz_momentum_on_every_kernel():
    model = resnet18(width=2)
    optimizer = build_vision_optimizer("muon-nd", model, {})
    assert isinstance(optimizer, MARS)
    group = next(g for g in optimizer.param_groups if routes_to_mars(model.stem.weight, g))
    assert group["mars_type"] == "mars-shampoo" and group["gamma"] == 0.0
    assert any(p is model.stem.weight for p in group["params"])


def test_multistep_schedule_divides_the_lr_at_the_milestones(tmp_path):
    write_easy_folder(tmp_path / "data", per_class=4)
    config = VisionConfig(
        data=f"folder:{tmp_path / 'data'}",
        optimizer="adamw",
        hyperparams={"lr": 0.01},
        width=2,
        epochs=4,
        batch_size=8,
        run_dir=tmp_path / "run",
        quiet=True,
        device="cpu",
    )
    VisionTrainer(config).train()
    lrs = [json.loads(line)["lr"] for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert lrs == pytest.approx([0.01, 0.01, 0.001, 0.0001])
