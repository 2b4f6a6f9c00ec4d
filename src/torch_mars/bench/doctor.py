"""``torch-mars doctor``: check an install on this machine and write a report to paste into a bug
report. Three parts, each a Markdown section:

1. the environment: Python, torch, Triton, CUDA and driver versions, the device;
2. parity: every MARS rule on every step path available on the device (the per-tensor loop,
   foreach, and the fused kernels: compiled on CPU, Triton on CUDA) against the float64 loop on
   the CPU, on random tensors of every shape kind (matrix, conv kernel, vector), six steps;
3. a step timing table against ``torch.optim.AdamW(fused=True)`` on GPT-2-small shapes, side
   by side in one run (:mod:`torch_mars.bench.step`).

It exits with status 1 when a path is outside its tolerance.
"""

from __future__ import annotations

import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from torch_mars.bench.table import markdown_table
from torch_mars.optim import MARS, MARS_TYPES

SHAPES = [(48, 32), (32,), (16, 4, 3, 3), (64, 24)]
STEPS = 6
# Relative error allowed against the float64 loop, per rule: float64 round-off for the
# element-wise rules; Newton-Schulz runs in bf16, whose matmuls round differently per path.
TOLERANCES = {"mars-adamw": 1e-9, "mars-lion": 1e-9, "mars-shampoo": 2e-2, "mars-m": 2e-2}
TIMED_ROWS = (
    "adamw-foreach",
    "adamw-fused",
    "mars-adamw-loop",
    "mars-adamw-foreach",
    "mars-adamw-fused",
    "mars-lion-fused",
)


@dataclass(frozen=True)
class DoctorOptions:
    """``torch-mars doctor``'s settings.

    Attributes:
        device: ``"cpu"``, ``"cuda"`` or None (CUDA when available).
        model: the GPT config whose parameter shapes the timing uses.
        repeats: timed steps per row (median reported), after one warm-up step.
        out: where to write the Markdown report (None: only print it).
    """

    device: str | None = None
    model: str = "gpt2-small"
    repeats: int = 5
    out: Path | None = None

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise ValueError(f"--repeats must be >= 1, got {self.repeats}")


@dataclass(frozen=True)
class ParityRow:
    rule: str
    path: str
    relative_error: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.relative_error <= self.tolerance


def _driver_version() -> str:
    try:
        query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        result = subprocess.run(query, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return "unknown (no nvidia-smi)"
    return result.stdout.strip().splitlines()[0]


def environment(device: torch.device) -> list[tuple[str, str]]:
    """(item, value) pairs describing the install and the device."""
    from torch_mars import __version__
    from torch_mars.kernels import TRITON_AVAILABLE
    from torch_mars.train.runtime import describe_device

    triton = "not installed"
    if TRITON_AVAILABLE:
        import triton as triton_module

        triton = triton_module.__version__
    rows = [
        ("torch-mars", __version__),
        ("Python", platform.python_version()),
        ("torch", torch.__version__),
        ("Triton", triton),
        ("platform", platform.platform()),
        ("device", f"{device} ({describe_device(device)})"),
        ("CPU threads", str(torch.get_num_threads())),
    ]
    if device.type == "cuda":
        rows += [("CUDA (torch build)", str(torch.version.cuda)), ("driver", _driver_version())]
    return rows


def available_paths(device: torch.device) -> dict[str, dict]:
    """The step paths that can run on ``device``, as MARS flags."""
    paths: dict[str, dict] = {"loop": {"foreach": False}, "foreach": {"foreach": True}}
    from torch_mars.kernels import TRITON_AVAILABLE

    if device.type == "cpu":
        paths["fused (compiled)"] = {"fused": True}
    elif TRITON_AVAILABLE:
        paths["fused (Triton)"] = {"fused": True}
    return paths


def _run(rule: str, flags: dict, device: torch.device, dtype: torch.dtype) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    initial = [torch.randn(shape, generator=generator, dtype=torch.float64) for shape in SHAPES]
    params = [p.to(device, dtype).requires_grad_() for p in initial]
    opt = MARS(params, lr=0.02, gamma=0.3, weight_decay=0.1, mars_type=rule, amsgrad=True, **flags)
    for _ in range(STEPS):
        for p in params:
            grad = torch.randn(p.shape, generator=generator, dtype=torch.float64)
            p.grad = grad.to(device, dtype)
        opt.step()
    return [p.detach().to("cpu", torch.float64) for p in params]


def parity(device: torch.device) -> list[ParityRow]:
    """Every rule on every available path, in float64, against the float64 loop on the CPU."""
    rows = []
    for rule in MARS_TYPES:
        reference = _run(rule, {"foreach": False}, torch.device("cpu"), torch.float64)
        scale = max(r.abs().max().item() for r in reference)
        for path, flags in available_paths(device).items():
            result = _run(rule, flags, device, torch.float64)
            error = max((a - b).abs().max().item() for a, b in zip(result, reference, strict=True))
            rows.append(ParityRow(rule, path, error / scale, TOLERANCES[rule]))
    return rows


def timing(device: torch.device, model_name: str, repeats: int) -> str:
    """The step table of :mod:`torch_mars.bench.step` for :data:`TIMED_ROWS`."""
    from torch_mars.bench.step import default_candidates, format_step_table, run_step_benchmark
    from torch_mars.models.gpt import GPT, gpt_config

    candidates = [c for c in default_candidates() if c.name in TIMED_ROWS]
    model = GPT(gpt_config(model_name, 256)).to(device)
    results = run_step_benchmark(model, candidates, warmup=1, repeats=repeats)
    return format_step_table(results)


def run_doctor(options: DoctorOptions) -> int:
    """Run the three checks, print the report (and write it to ``options.out``); 1 if a
    parity check fails."""
    from torch_mars.bench.commands import _device

    device = _device(options.device)
    print(f"torch-mars doctor on {device}: environment, parity, step timing", file=sys.stderr)
    rows = parity(device)
    sections = [
        "# torch-mars doctor",
        "## Environment",
        markdown_table(["item", "value"], [list(row) for row in environment(device)]),
        f"## Parity against the float64 loop ({STEPS} steps, float64, shapes {SHAPES})",
        markdown_table(
            ["rule", "path", "relative error", "tolerance", "ok"],
            [
                [
                    r.rule,
                    r.path,
                    f"{r.relative_error:.1e}",
                    f"{r.tolerance:.0e}",
                    "yes" if r.ok else "NO",
                ]
                for r in rows
            ],
        ),
        f"## One optimizer step, {options.model} shapes (median of {options.repeats})",
        timing(device, options.model, options.repeats),
    ]
    report = "\n\n".join(sections) + "\n"
    print(report)
    if options.out is not None:
        options.out.parent.mkdir(parents=True, exist_ok=True)
        options.out.write_text(report)
        print(f"wrote {options.out}", file=sys.stderr)
    return 0 if all(r.ok for r in rows) else 1
