"""Compile the Triton kernels for NVIDIA GPUs without one: Triton's bundled toolchain lowers each
specialization the launcher can ask for (:func:`~.triton_step.launch_specializations`) to PTX
and a cubin for ``sm_80`` or ``sm_90``, and the bundled ``cuobjdump`` reads each cubin's
registers, local memory (register spills), stack and shared memory.

    python -m torch_mars.bench.triton_compile [--arch 80 90] [--all] [--jobs 2] [--json FILE]

By default it compiles a covering set (every variant for fp32 parameters and state; for the
other dtype pairs, every kernel with all flags off and all on); ``--all`` compiles all of them.
It exits with status 1 if a variant fails to compile or spills. The kernels must not be running
under ``TRITON_INTERPRET=1`` (the variable is dropped for the worker processes).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch


@dataclass(frozen=True)
class CompileReport:
    """One compiled variant.

    Attributes:
        kernel, arch: the kernel's name and the target (``80``: sm_80, ``90``: sm_90).
        variant: its compile-time arguments, as text.
        registers: registers per thread.
        local_bytes: local memory per thread (register spills), bytes.
        stack_bytes: stack frame per thread, bytes.
        shared_bytes: static shared memory per block, bytes.
        seconds: compile time.
        error: the compiler's message if it failed, else "".
    """

    kernel: str
    arch: int
    variant: str
    registers: int
    local_bytes: int
    stack_bytes: int
    shared_bytes: int
    seconds: float
    error: str = ""

    @property
    def spills(self) -> bool:
        return self.local_bytes > 0 or self.stack_bytes > 0


def _variant_text(constexprs: dict[str, Any]) -> str:
    return " ".join(f"{key}={value}" for key, value in constexprs.items() if key != "BLOCK")


def _resource_usage(cubin: bytes) -> dict[str, int]:
    """``REG``, ``STACK``, ``SHARED`` and ``LOCAL`` of the cubin's one function."""
    import triton.backends.nvidia as nvidia

    cuobjdump = Path(nvidia.__file__).parent / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "kernel.cubin"
        path.write_bytes(cubin)
        listing = subprocess.run(
            [str(cuobjdump), "-res-usage", str(path)], capture_output=True, text=True, check=True
        ).stdout
    return {
        key: int(value) for key, value in re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", listing)
    }


def compile_variant(index: int, arch: int) -> CompileReport:
    """Compile specialization ``index`` of :func:`launch_specializations` for ``sm_{arch}``."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from torch_mars.kernels import triton_step, triton_symmetric

    spec = all_specializations()[index]
    module = triton_step if hasattr(triton_step, spec.kernel) else triton_symmetric
    kernel = getattr(module, spec.kernel)
    start = time.perf_counter()
    try:
        compiled = triton.compile(
            ASTSource(kernel, spec.signature, spec.constexprs, spec.attrs),
            target=GPUTarget("cuda", arch, 32),
            options=spec.options,
        )
        usage = _resource_usage(compiled.asm["cubin"])
    except Exception as error:  # a variant that fails is reported with the others
        message = f"{type(error).__name__}: {error}".splitlines()[0][:300]
        return CompileReport(
            spec.kernel, arch, _variant_text(spec.constexprs), 0, 0, 0, 0, 0.0, message
        )
    return CompileReport(
        spec.kernel,
        arch,
        _variant_text(spec.constexprs),
        usage.get("REG", 0),
        usage.get("LOCAL", 0),
        usage.get("STACK", 0),
        usage.get("SHARED", 0),
        time.perf_counter() - start,
    )


def all_specializations() -> list[Any]:
    """Every variant the launchers can ask for: the step's kernels
    (:func:`~torch_mars.kernels.triton_step.launch_specializations`), then Newton-Schulz's
    symmetric product (:func:`~torch_mars.kernels.triton_symmetric.launch_specializations`)."""
    from torch_mars.kernels import triton_step, triton_symmetric

    return triton_step.launch_specializations() + triton_symmetric.launch_specializations()


def covering_indices() -> list[int]:
    """The default set: every variant with fp32 parameters and state, and for the other dtype
    pairs each kernel kind (norm, MARS update, AdamW update) with all flags off and all on;
    every variant of the symmetric product (a dozen)."""
    from triton import language as tl

    chosen = []
    for index, spec in enumerate(all_specializations()):
        if spec.kernel == "_lower_tile_product_kernel":
            chosen.append(index)
            continue
        c = spec.constexprs
        fp32 = c.get("P_DTYPE", c["G_DTYPE"]) == tl.float32 and c["S_DTYPE"] == tl.float32
        flags = [value for key, value in c.items() if isinstance(value, bool) and key != "IS_MARS"]
        if spec.kernel == "_mars_update_kernel" and not c["IS_MARS"]:
            flags = [c["AMSGRAD"], c["HAS_GRAD_SCALE"], c["MAXIMIZE"]]
        if fp32 or all(flags) or not any(flags):
            chosen.append(index)
    return chosen


def _init_worker() -> None:
    os.environ.pop("TRITON_INTERPRET", None)
    torch.set_num_threads(1)


def compile_all(indices: list[int], archs: list[int], jobs: int) -> list[CompileReport]:
    """Compile ``indices`` for every arch in ``jobs`` fresh processes (spawned, so that no
    kernel defined under the interpreter is reused)."""
    tasks = [(index, arch) for arch in archs for index in indices]
    with concurrent.futures.ProcessPoolExecutor(
        max_workers=jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker
    ) as pool:
        return list(pool.map(compile_variant, *zip(*tasks, strict=True)))


def summary_table(reports: list[CompileReport]) -> str:
    """Per kernel and arch: variants, failures, registers (median and max), spills, shared
    memory and compile time."""
    from torch_mars.bench.table import markdown_table

    rows = []
    keys = sorted({(r.kernel, r.arch) for r in reports})
    for kernel, arch in keys:
        group = [r for r in reports if (r.kernel, r.arch) == (kernel, arch)]
        ok = [r for r in group if not r.error]
        registers = [r.registers for r in ok] or [0]
        rows.append(
            [
                kernel,
                f"sm_{arch}",
                str(len(group)),
                str(len(group) - len(ok)),
                f"{statistics.median(registers):.0f} / {max(registers)}",
                str(sum(r.spills for r in ok)),
                str(max((r.shared_bytes for r in ok), default=0)),
                f"{sum(r.seconds for r in ok):.0f}",
            ]
        )
    headers = ["kernel", "target", "variants", "failed", "registers (median / max)",
               "variants that spill", "shared (B, max)", "compile (s)"]  # fmt: skip
    return markdown_table(headers, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", type=int, nargs="+", default=[80, 90], choices=(80, 90))
    parser.add_argument("--all", action="store_true", help="every variant, not the covering set")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", type=Path, help="write every variant's report here")
    args = parser.parse_args(argv)
    from torch_mars.kernels import TRITON_AVAILABLE

    if not TRITON_AVAILABLE:
        print("triton is not installed (pip install torch-mars[triton])", file=sys.stderr)
        return 2
    indices = list(range(len(all_specializations()))) if args.all else covering_indices()
    reports = compile_all(indices, args.arch, max(1, args.jobs))
    print(summary_table(reports))
    for report in reports:
        if report.error or report.spills:
            print(f"{report.kernel} sm_{report.arch} {report.variant}: {report.error or 'spills'}")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in reports], indent=1) + "\n")
    return 1 if any(r.error or r.spills for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
