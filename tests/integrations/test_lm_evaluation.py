"""`torch-mars eval`: lm-eval scores an exported run offline, on a tiny multiple-choice task
from a local file, and the log-likelihoods it computes are our GPT's own."""

from __future__ import annotations

import json

import pytest
import torch

from harness_helpers import synthetic_corpus, tiny_config
from torch_mars.cli import main
from torch_mars.integrations.hf_export import export_hf, load_run_model
from torch_mars.integrations.lm_evaluation import RESULTS_FILE, EvalPlan, evaluate_hf_folder
from torch_mars.train import Trainer

pytest.importorskip("lm_eval")

QUESTIONS = [
    {"question": "abc", "choices": ["def", "xyz"], "answer": 0},
    {"question": "hello", "choices": [" world", "qqqq"], "answer": 0},
    {"question": "n = 12", "choices": ["zz", "34"], "answer": 1},
]


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("eval") / "run"
    Trainer(tiny_config(run_dir), synthetic_corpus()).train()
    return run_dir


@pytest.fixture
def tiny_task(tmp_path):
    """A folder with one lm-eval task, ``tiny_mc``, read from a local JSON-lines file."""
    folder = tmp_path / "tasks"
    folder.mkdir()
    data = folder / "tiny_mc.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in QUESTIONS))
    (folder / "tiny_mc.yaml").write_text(
        "task: tiny_mc\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {data}\n"
        "test_split: test\n"
        "output_type: multiple_choice\n"
        'doc_to_text: "{{question}}"\n'
        'doc_to_choice: "{{choices}}"\n'
        'doc_to_target: "{{answer}}"\n'
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
    )
    return folder


def log_likelihood(model, context: str, continuation: str) -> float:
    """Sum of log p(continuation bytes | context) under our GPT."""
    ids = torch.tensor([list((context + continuation).encode())])
    start = len(context.encode())
    with torch.no_grad():
        logits, _ = model(ids[:, :-1])
    log_probs = torch.log_softmax(logits.double(), dim=-1)[0, start - 1 :]
    return float(log_probs.gather(1, ids[0, start:, None]).sum())


def test_lm_eval_scores_the_exported_run_with_our_log_likelihoods(trained_run, tiny_task, tmp_path):
    exported = export_hf(trained_run, tmp_path / "hf")
    plan = EvalPlan(("tiny_mc",), include_path=tiny_task, batch_size=2, builtin_tasks=False)
    results = evaluate_hf_folder(exported.folder, plan, log_samples=True)
    model, _ = load_run_model(trained_run)
    correct = 0
    for sample in results["samples"]["tiny_mc"]:
        theirs = [response[0][0] for response in sample["resps"]]
        ours = [log_likelihood(model, *arguments) for arguments in sample["arguments"]]
        assert theirs == pytest.approx(ours, abs=1e-4)
        correct += max(range(len(ours)), key=ours.__getitem__) == sample["target"]
    assert results["results"]["tiny_mc"]["acc,none"] == pytest.approx(correct / len(QUESTIONS))


def test_eval_command_writes_the_results_into_the_run(trained_run, tiny_task, capsys):
    arguments = ["eval", str(trained_run), "--tasks", "tiny_mc", "--include-path", str(tiny_task)]
    assert main([*arguments, "--limit", "2", "--no-builtin-tasks"]) == 0
    assert "tiny_mc" in capsys.readouterr().out
    record = json.loads((trained_run / RESULTS_FILE).read_text())
    assert record["plan"] == {"tasks": ["tiny_mc"], "limit": 2, "device": "cpu"}
    assert 0.0 <= record["results"]["tiny_mc"]["acc,none"] <= 1.0
    assert (trained_run / "hf" / "model.safetensors").is_file()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"tasks": ()}, "tasks must name"),
        ({"limit": 0}, "limit must be >= 1"),
        ({"num_fewshot": -1}, "num_fewshot must be >= 0"),
        ({"batch_size": 0}, "batch_size must be >= 1"),
        ({"builtin_tasks": False}, "takes tasks from include_path"),
    ],
)
def test_a_bad_plan_is_a_clear_error(changes, message):
    with pytest.raises(ValueError, match=message):
        EvalPlan(**{"tasks": ("tiny_mc",), **changes})


def test_a_missing_include_path_is_refused_before_anything_runs(trained_run, tmp_path):
    with pytest.raises(FileNotFoundError, match="include_path must be a folder"):
        EvalPlan(("tiny_mc",), include_path=tmp_path / "nowhere")
    assert main(["eval", str(trained_run), "--tasks", "x", "--include-path", "/nowhere"]) == 2
