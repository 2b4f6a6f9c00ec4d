"""Downstream evaluation of a trained GPT with EleutherAI's lm-evaluation-harness, as the MARS
paper reports it (HellaSwag, ARC, PIQA, ... zero-shot): the run is exported with
:func:`~torch_mars.integrations.hf_export.export_hf` into ``RUN_DIR/hf`` and lm-eval's ``hf``
model reads that folder.

Tasks are lm-eval's names (``hellaswag``, ``arc_easy``, ...), whose datasets lm-eval downloads
from the hub, or tasks of your own: a folder of task YAML files given as ``include_path`` (a
``dataset_path: json`` task with local ``data_files`` needs no network).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch_mars.integrations.hf_export import export_hf

HF_FOLDER = "hf"
RESULTS_FILE = "lm-eval.json"


@dataclass(frozen=True)
class EvalPlan:
    """One lm-eval run over an exported GPT.

    Attributes:
        tasks: lm-eval task names.
        include_path: a folder of extra task YAML files, or None.
        limit: at most this many documents per task (None: all).
        num_fewshot: examples in each prompt (None: each task's default).
        batch_size: sequences per forward pass.
        device: ``cpu``, ``cuda``, ``cuda:1``, ...
        builtin_tasks: index lm-eval's own tasks (thousands of YAML files: about 17 s on two
            CPU cores). False takes the tasks from ``include_path`` only.
    """

    tasks: tuple[str, ...]
    include_path: Path | None = None
    limit: int | None = None
    num_fewshot: int | None = None
    batch_size: int = 8
    device: str = "cpu"
    builtin_tasks: bool = True

    def __post_init__(self) -> None:
        if not self.tasks:
            raise ValueError("tasks must name at least one lm-eval task")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1 or None, got {self.limit}")
        if self.num_fewshot is not None and self.num_fewshot < 0:
            raise ValueError(f"num_fewshot must be >= 0 or None, got {self.num_fewshot}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.include_path is not None and not Path(self.include_path).is_dir():
            raise FileNotFoundError(f"{self.include_path}: include_path must be a folder")
        if not self.builtin_tasks and self.include_path is None:
            raise ValueError("builtin_tasks=False takes tasks from include_path: give one")


def evaluate_hf_folder(folder: Path, plan: EvalPlan, log_samples: bool = False) -> dict[str, Any]:
    """lm-eval's ``simple_evaluate`` on the ``transformers`` model in ``folder`` (float32);
    returns lm-eval's results dict (``results``, ``n-shot``, ``versions``, and ``samples`` when
    ``log_samples``)."""
    try:
        import lm_eval
        from lm_eval.tasks import TaskManager
    except ImportError as error:
        raise ImportError(
            f"eval needs the eval extra ({error.name} is missing): pip install 'torch-mars[eval]'"
        ) from None
    include = None if plan.include_path is None else str(plan.include_path)
    return lm_eval.simple_evaluate(
        model="hf",
        model_args={"pretrained": str(folder), "dtype": "float32"},
        tasks=list(plan.tasks),
        task_manager=TaskManager(include_path=include, include_defaults=plan.builtin_tasks),
        num_fewshot=plan.num_fewshot,
        limit=plan.limit,
        batch_size=plan.batch_size,
        device=plan.device,
        log_samples=log_samples,
    )


def evaluate_run(
    run_dir: str | Path, plan: EvalPlan, tokenizer_dir: Path | None = None
) -> dict[str, Any]:
    """Export ``run_dir``'s GPT to ``run_dir/hf``, evaluate it with lm-eval, and write the
    results to ``run_dir/lm-eval.json``; returns lm-eval's results dict."""
    run_dir = Path(run_dir)
    exported = export_hf(run_dir, run_dir / HF_FOLDER, tokenizer_dir)
    results = evaluate_hf_folder(exported.folder, plan)
    record = {key: results[key] for key in ("results", "n-shot", "versions") if key in results}
    record["plan"] = {"tasks": list(plan.tasks), "limit": plan.limit, "device": plan.device}
    (run_dir / RESULTS_FILE).write_text(json.dumps(record, indent=2, default=str) + "\n")
    return results


def results_table(results: dict[str, Any]) -> str:
    """lm-eval's Markdown table of ``results``."""
    from lm_eval.utils import make_table

    return make_table(results)
