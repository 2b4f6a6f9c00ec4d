"""The README's main job, ``python -m torch_mars.demo``, trains and prints a loss per step."""

from __future__ import annotations

from torch_mars import demo


def test_demo_prints_a_loss_per_step_and_both_optimizers_learn(capsys):
    history = demo.main(["--steps", "8", "--batch-size", "64"])
    out = capsys.readouterr().out
    assert len(history) == 8
    assert len([line for line in out.splitlines() if line.split()[:1] == ["8"]]) == 1
    assert history[-1][0] < history[0][0] - 0.5
    assert history[-1][1] < history[0][1] - 0.5
    assert "held-out loss" in out


def test_stdlib_corpus_is_real_python_source():
    text = bytes(demo.stdlib_source_bytes(limit=100_000).tolist()).decode("utf-8", "replace")
    assert "def " in text and "import " in text
