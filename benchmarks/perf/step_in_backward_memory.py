"""Peak memory of MARS-AdamW stepped after backward against stepped inside it
(:class:`torch_mars.StepInBackward`), on GPT-2 small (124 M parameters, fp32) with one sequence
of 128 tokens per step: each mode runs 3 steps in a fresh process, which reports its peak
resident memory (``ru_maxrss``) and the median step time.

    python benchmarks/perf/step_in_backward_memory.py

Inside backward, each gradient is freed once its tensor is stepped, so the 0.5 GB of fp32
gradients are never held at once; the state (m, v, g_tilde: 1.5 GB) is the same in both.
"""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import time

STEPS = 3


def measure(mode: str) -> dict[str, float]:
    import torch

    from torch_mars import MARS, StepInBackward
    from torch_mars.models.gpt import GPT, gpt_config

    torch.manual_seed(0)
    model = GPT(gpt_config("gpt2-small", 50257))
    batch = torch.randint(0, 50257, (1, 129))
    if mode == "in-backward":
        optimizer = StepInBackward(model.parameters(), lr=1e-4)
    else:
        optimizer = MARS(model.parameters(), lr=1e-4, foreach=False)
    times = []
    for _ in range(STEPS):
        start = time.perf_counter()
        _, loss = model(batch[:, :-1], batch[:, 1:])
        loss.backward()
        if mode == "after-backward":
            optimizer.step()
            optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"peak_rss_mib": peak_mib, "iteration_s": statistics.median(times)}


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(measure(sys.argv[2])))
        return
    results = {}
    for mode in ("after-backward", "in-backward"):
        child = [sys.executable, __file__, "--child", mode]
        output = subprocess.run(child, capture_output=True, text=True, check=True).stdout
        results[mode] = json.loads(output.strip().splitlines()[-1])
    saved = results["after-backward"]["peak_rss_mib"] - results["in-backward"]["peak_rss_mib"]
    print("| mode | peak RSS (MiB) | iteration (s) |\n|---|---:|---:|")
    for mode, row in results.items():
        print(f"| {mode} | {row['peak_rss_mib']:.0f} | {row['iteration_s']:.2f} |")
    print(f"\nstepping inside backward saves {saved:.0f} MiB of peak memory")


if __name__ == "__main__":
    main()
