"""Every Triton specialization the launcher can ask for is enumerated, and the covering set of
them compiles for sm_80 and sm_90 with Triton's bundled toolchain, on a machine without a GPU,
with no register spills."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import torch_mars.kernels.triton_step as triton_step
import torch_mars.optim.functional as functional
from torch_mars import MARS
from torch_mars.kernels import TRITON_AVAILABLE

pytestmark = pytest.mark.skipif(not TRITON_AVAILABLE, reason="needs triton")


class RecordingKernel:
    """Stands in for a kernel: records the compile-time arguments of each launch, then runs it."""

    def __init__(self, kernel, seen: list) -> None:
        self.kernel, self.seen = kernel, seen

    def __getitem__(self, grid):
        def launch(*args, **constexprs):
            self.seen.append(constexprs)
            return self.kernel[grid](*args, **constexprs)

        return launch


@pytest.mark.skipif(torch.cuda.is_available(), reason="runs the kernels in the CPU interpreter")
@pytest.mark.parametrize(
    "options",
    [
        {"mars_type": "mars-adamw"},
        {"mars_type": "mars-lion", "amsgrad": True, "maximize": True, "skip_nonfinite": False},
        {"mars_type": "mars-shampoo", "state_dtype": torch.bfloat16},
    ],
)
def test_every_launch_is_an_enumerated_specialization(monkeypatch, options):
    seen: list = []
    for name in ("_mars_norm_kernel", "_mars_update_kernel"):
        monkeypatch.setattr(triton_step, name, RecordingKernel(getattr(triton_step, name), seen))
    monkeypatch.setattr(functional, "fused_backend", lambda tensors: "triton")
    params = [torch.zeros(4, 3, requires_grad=True), torch.zeros(3, requires_grad=True)]
    opt = MARS(params, fused=True, **options)
    for _ in range(2):
        for p in params:
            p.grad = torch.randn_like(p)
        opt.step()
    known = [spec.constexprs for spec in triton_step.launch_specializations()]
    assert len(seen) >= 4
    for constexprs in seen:
        assert constexprs in known, constexprs


@pytest.mark.parametrize("arch", [80, 90])
def test_the_covering_set_compiles_for_sm80_and_sm90_without_spills(tmp_path, arch):
    """One arch per test, so that the two compile side by side on a suite's workers."""
    report = tmp_path / "compile.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    command = [sys.executable, "-m", "torch_mars.bench.triton_compile", "--arch", str(arch)]
    command += ["--json", str(report)]
    completed = subprocess.run(command, env=env, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    reports = json.loads(report.read_text())
    assert {r["arch"] for r in reports} == {arch}
    kernels = {"_mars_norm_kernel", "_mars_update_kernel", "_lower_tile_product_kernel"}
    assert {r["kernel"] for r in reports} == kernels
    assert all(not r["error"] and r["local_bytes"] == 0 and r["stack_bytes"] == 0 for r in reports)
    assert all(0 < r["registers"] <= 255 for r in reports)
    assert f"| _mars_update_kernel | sm_{arch} |" in completed.stdout
