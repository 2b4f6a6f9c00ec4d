"""Step benchmark: the median time of one ``optimizer.step()`` for each MARS implementation next
to ``torch.optim.AdamW`` (foreach and fused) and ``torch.optim.Muon``, on the parameter shapes
of a named GPT config, with random gradients.

Every candidate is built on the same parameters and warmed up (which also compiles the compiled
kernels); then rounds time one step of each candidate in turn, the device synchronised around
each step, and a row reports the median. Besides the
time, a row gives the ratio to fused AdamW measured in the same run, the aten ops one step
dispatches (:mod:`.op_count`: the host cost a GPU pays in launches, counted on any device), the
effective bandwidth against the bytes the rule must move at the least, and the persistent state
memory.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch import nn

from torch_mars.bench.op_count import count_aten_ops, count_python_calls
from torch_mars.bench.table import markdown_table
from torch_mars.optim import MARS, mars_param_groups
from torch_mars.optim.newton_schulz import batched_shampoo_directions
from torch_mars.optim.step_math import ORTHOGONAL_RULES
from torch_mars.train.optimizers import CombinedOptimizer

BASELINE = "adamw-fused"


@dataclass(frozen=True)
class Candidate:
    """One optimizer configuration to time.

    Attributes:
        name: row label, e.g. ``"mars-adamw-fused"``.
        build: makes the optimizer over the benchmark model's parameters.
    """

    name: str
    build: Callable[[nn.Module], object]


def _muon(model: nn.Module) -> CombinedOptimizer:
    groups = mars_param_groups(model, embeddings="adamw")
    matrices = [p for g in groups if g["use_mars"] for p in g["params"]]
    rest = [p for g in groups if not g["use_mars"] for p in g["params"]]
    return CombinedOptimizer(torch.optim.Muon(matrices), torch.optim.AdamW(rest, fused=True))


def _mars(model: nn.Module, mars_type: str, **flags: object) -> MARS:
    # As in the harness: Shampoo sends embeddings to AdamW (Newton-Schulz on a vocabulary-sized
    # matrix is neither useful nor cheap); the other rules take them.
    embeddings = "adamw" if mars_type in ORTHOGONAL_RULES else "mars"
    return MARS(mars_param_groups(model, embeddings=embeddings), mars_type=mars_type, **flags)


class GraphReplay:
    """An optimizer whose ``step()`` replays one step captured in a CUDA graph: the host cost
    of a step vanishes, what is left is the kernels' time. Built after three eager steps on a
    side stream (state, compilation), as ``torch.cuda.graph`` asks; the benchmark's gradients
    stay where they are, so the graph reads the current ones."""

    def __init__(self, optimizer: object) -> None:
        self.optimizer = optimizer
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                optimizer.step()  # type: ignore[attr-defined]
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            optimizer.step()  # type: ignore[attr-defined]

    @property
    def state(self) -> dict:
        return self.optimizer.state  # type: ignore[attr-defined]

    def step(self) -> None:
        self.graph.replay()


def cuda_candidates() -> list[Candidate]:
    """The rows only CUDA runs: fused AdamW (``capturable=True``) and MARS-AdamW (float32 and
    bf16 state) and MARS-Shampoo (``cuda_graph=True``), each replayed from a captured CUDA
    graph; and MARS-Shampoo with Newton-Schulz's symmetric products in Triton
    (``ns_products="triangle"``)."""
    return [
        Candidate(
            "mars-shampoo-triangle", lambda m: _mars(m, "mars-shampoo", ns_products="triangle")
        ),
        Candidate(
            "adamw-fused-graph",
            lambda m: GraphReplay(torch.optim.AdamW(m.parameters(), fused=True, capturable=True)),
        ),
        Candidate(
            "mars-adamw-graph", lambda m: GraphReplay(_mars(m, "mars-adamw", cuda_graph=True))
        ),
        Candidate(
            "mars-adamw-graph-bf16-state",
            lambda m: GraphReplay(
                _mars(m, "mars-adamw", cuda_graph=True, state_dtype=torch.bfloat16)
            ),
        ),
        Candidate(
            "mars-shampoo-graph",
            lambda m: GraphReplay(_mars(m, "mars-shampoo", cuda_graph=True)),
        ),
    ]


def default_candidates(include_state_bf16: bool = True) -> list[Candidate]:
    """torch AdamW foreach/fused, torch Muon, every MARS rule with no flags (the device's default
    path) and in each implementation,
    MARS-AdamW in each implementation with ``skip_nonfinite=False``, and unclipped MARS-Lion with
    two buffers and with one (``one_buffer=True``), foreach and fused."""
    candidates = [
        Candidate("adamw-foreach", lambda m: torch.optim.AdamW(m.parameters(), foreach=True)),
        Candidate(BASELINE, lambda m: torch.optim.AdamW(m.parameters(), fused=True)),
    ]
    if hasattr(torch.optim, "Muon"):
        candidates.append(Candidate("muon", _muon))
    implementations = {
        "loop": {"foreach": False},
        "foreach": {"foreach": True},
        "fused": {"fused": True},
    }
    for rule in ("mars-adamw", "mars-lion", "mars-shampoo"):
        candidates.append(Candidate(f"{rule}-default", lambda m, r=rule: _mars(m, r)))
        for label, flags in implementations.items():
            candidates.append(
                Candidate(
                    f"{rule}-{label}",
                    lambda m, r=rule, f=flags: _mars(m, r, **f),
                )
            )
    for label, flags in implementations.items():  # the cost of the default non-finite skip
        candidates.append(
            Candidate(
                f"mars-adamw-{label}-no-skip",
                lambda m, f=flags: _mars(m, "mars-adamw", skip_nonfinite=False, **f),
            )
        )
    for path in ("foreach", "fused"):
        for label, flags in {"no-clip": {}, "one-buffer": {"one_buffer": True}}.items():
            candidates.append(
                Candidate(
                    f"mars-lion-{path}-{label}",
                    lambda m, f={**flags, **implementations[path]}: _mars(
                        m, "mars-lion", clip=False, **f
                    ),
                )
            )
    if include_state_bf16:
        candidates.append(
            Candidate(
                "mars-adamw-fused-bf16-state",
                lambda m: _mars(m, "mars-adamw", fused=True, state_dtype=torch.bfloat16),
            )
        )
    return candidates


def _states(optimizer: object) -> list[dict]:
    return [opt.state for opt in getattr(optimizer, "optimizers", [optimizer])]


def uses_newton_schulz(candidate: Candidate) -> bool:
    """Whether the candidate orthogonalises matrices (Muon, MARS-Shampoo): slow on CPU."""
    return candidate.name == "muon" or candidate.name.startswith("mars-shampoo")


def bytes_per_step(optimizer: object, params: list[nn.Parameter]) -> int:
    """The fewest bytes a step of ``optimizer`` must move over ``params``.

    Per element: read ``p`` and ``g``, write ``p``, and read and write each parameter-sized
    state buffer the optimizer keeps for that tensor (AdamW ``m, v``; MARS-AdamW ``m, v,
    g_tilde``; MARS-Lion and the Shampoo matrices ``m, g_tilde``; Muon ``m``), in the buffer's
    dtype. Newton-Schulz traffic is not counted.
    """
    states = _states(optimizer)
    total = 0
    for p in params:
        buffers = next((state[p] for state in states if p in state), {})
        state_bytes_per_element = sum(
            t.element_size()
            for t in buffers.values()
            if torch.is_tensor(t) and t.shape == p.shape and t.ndim > 0
        )
        total += (3 * p.element_size() + 2 * state_bytes_per_element) * p.numel()
    return total


def state_bytes(optimizer: object) -> int:
    """Bytes held in the optimizer's persistent per-parameter buffers (0-D step counters
    excluded)."""
    return sum(
        t.numel() * t.element_size()
        for state in _states(optimizer)
        for entry in state.values()
        for t in entry.values()
        if torch.is_tensor(t) and t.ndim > 0
    )


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class StepResult:
    """One row of the step benchmark (times in milliseconds, memory in MiB)."""

    name: str
    median_ms: float
    ratio_to_fused_adamw: float
    ops_per_step: int | None
    python_calls_per_step: int
    effective_gb_per_s: float
    state_mib: float
    peak_step_mib: float | None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def time_steps(step: Callable[[], None], device: torch.device, warmup: int, repeats: int) -> float:
    """Median wall time (ms) of ``step`` over ``repeats`` calls after ``warmup`` calls."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        step()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def benchmark_parameters(model: nn.Module, seed: int = 0) -> list[nn.Parameter]:
    """``model``'s parameters with fixed random gradients of a realistic scale."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = (1e-3 * torch.randn(p.shape, generator=generator)).to(p.device, p.dtype)
    return params


def _timed_step(optimizer: object, device: torch.device) -> tuple[float, float | None]:
    """Seconds of one synchronised step, and on CUDA the MiB it allocated beyond what it kept."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    synchronize(device)
    start = time.perf_counter()
    optimizer.step()
    synchronize(device)
    seconds = time.perf_counter() - start
    if device.type != "cuda":
        return seconds, None
    return seconds, (torch.cuda.max_memory_allocated(device) - before) / 2**20


def run_step_benchmark(
    model: nn.Module,
    candidates: list[Candidate],
    warmup: int,
    repeats: int,
    progress: Callable[[str], None] = lambda name: None,
) -> list[StepResult]:
    """Time every candidate on ``model``'s parameters, round-robin.

    All candidates are built (each holds its own state) and warmed up, then each round times
    one step of every candidate, so slow drifts of a shared machine hit all rows alike. Each
    round takes the candidates in a new order (seeded, so a rerun repeats it): a row always
    timed right after the same other one pays for what that one leaves behind (caches, the
    allocator, a GPU's clocks), and the medians would carry that order.
    """
    params = benchmark_parameters(model)
    device = params[0].device
    optimizers = []
    for candidate in candidates:
        progress(candidate.name)
        optimizer = candidate.build(model)
        for _ in range(warmup):
            optimizer.step()
        optimizers.append(optimizer)
    times: list[list[float]] = [[] for _ in candidates]
    peaks: list[float | None] = [None] * len(candidates)
    order = random.Random(0)
    for _ in range(repeats):
        for index in order.sample(range(len(optimizers)), len(optimizers)):
            seconds, peak = _timed_step(optimizers[index], device)
            times[index].append(seconds)
            if peak is not None:
                peaks[index] = max(peak, peaks[index] or 0.0)
    medians = {c.name: 1e3 * statistics.median(t) for c, t in zip(candidates, times, strict=True)}
    baseline = medians.get(BASELINE, float("nan"))
    results = []
    for candidate, optimizer, peak in zip(candidates, optimizers, peaks, strict=True):
        ms = medians[candidate.name]
        moved = bytes_per_step(optimizer, params)
        ops = (
            None
            if runs_compiled_kernels(optimizer)
            else sum(count_aten_ops(optimizer.step).values())
        )
        results.append(
            StepResult(
                candidate.name,
                ms,
                ms / baseline,
                ops,
                count_python_calls(optimizer.step),
                moved / (ms * 1e-3) / 1e9,
                state_bytes(optimizer) / 2**20,
                peak,
            )
        )
    return results


def runs_compiled_kernels(optimizer: object) -> bool:
    """Whether a step runs ``torch.compile``d kernels (MARS ``fused=True`` off CUDA), whose ops
    a dispatch mode cannot count (torch.compile refuses to run under one): their host cost is
    one compiled call per tensor."""
    return isinstance(optimizer, MARS) and any(
        group["fused"] and not all(p.is_cuda for p in group["params"])
        for group in optimizer.param_groups
    )


def newton_schulz_ms(
    model: nn.Module, warmup: int, repeats: int, ns_steps: int = 5, products: str = "dense"
) -> float:
    """Median time of the batched Newton-Schulz directions of ``model``'s hidden matrices (not
    the embeddings), with ``products`` (``ns_products``): the non-element-wise part of a
    MARS-Shampoo step."""
    groups = mars_param_groups(model, embeddings="adamw")
    matrices = [torch.randn_like(p) for g in groups if g["use_mars"] for p in g["params"]]
    device = matrices[0].device
    return time_steps(
        lambda: batched_shampoo_directions(matrices, ns_steps, ns_products=products),
        device,
        warmup,
        repeats,
    )


def format_step_table(results: list[StepResult]) -> str:
    """A Markdown table of the step benchmark."""
    headers = [
        "optimizer",
        "step (ms)",
        "ratio to fused AdamW",
        "ops/step",
        "Python calls/step",
        "effective GB/s",
        "state (MiB)",
        "peak step (MiB)",
    ]
    return markdown_table(
        headers,
        (
            [
                r.name,
                f"{r.median_ms:.2f}",
                f"{r.ratio_to_fused_adamw:.2f}",
                "compiled" if r.ops_per_step is None else str(r.ops_per_step),
                str(r.python_calls_per_step),
                f"{r.effective_gb_per_s:.1f}",
                f"{r.state_mib:.0f}",
                "n/a" if r.peak_step_mib is None else f"{r.peak_step_mib:.0f}",
            ]
            for r in results
        ),
    )
