#!/usr/bin/env bash
# Everything issues #4, #5, #14, #17 and #26 need from a CUDA machine, in one call: the Triton
# kernels against the per-tensor loop on the GPU and a captured CUDA-graph step against eager
# steps, the count of host syncs per step, then `torch-mars bench step` (with CUDA-graph replay
# rows), Newton-Schulz's profile and its cheaper forms (benchmarks/perf/newton_schulz_forms.py) and
# `bench iteration` on GPT-2 small, and the FSDP2 step (distributed mode) on every GPU
# of the machine under torchrun (NCCL; on one GPU it still shows the DTensor dispatch cost the
# sharded path avoids).
# Run from the repository root where torch and triton are installed (the lent H100/H200 image
# has both, and no network: carry a folder of wheels for what it lacks, see WHEELS below).
# Tables go to stdout, JSON to $OUT (default runs/gpu).
set -euo pipefail
out=${OUT:-runs/gpu}
mkdir -p "$out"
if ! python -c "import tqdm" 2>/dev/null; then
    pip install --no-index --find-links "${WHEELS:-.wheels}" tqdm
fi
export PYTHONPATH=src:tests
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/device.txt"
# A failing test is reported, not fatal: the timings below are still wanted.
python -m pytest -q -p no:cacheprovider tests/test_fused_parity.py tests/test_compiled_step.py \
    tests/test_foreach_parity.py tests/test_nonfinite_skip.py tests/test_step_host_cost.py \
    tests/test_newton_schulz.py tests/test_step_plan.py tests/test_cuda_graph.py 2>&1 | tail -15 \
    | tee "$out/tests.txt" || true
python benchmarks/reliability/sync_check.py | tee "$out/sync-check.txt"
python benchmarks/perf/host_calls.py | tee "$out/host-calls.txt"
python -m torch_mars.cli bench step --device cuda --model gpt2-small --repeats 50 --warmup 5 \
    --json "$out/step-gpt2-small.json" || echo "bench step failed (above); going on"
python benchmarks/perf/newton_schulz_forms.py --device cuda --json "$out/newton-schulz-forms.json" \
    | tee "$out/newton-schulz-forms.txt" || echo "newton_schulz_forms failed (above); going on"
python -m torch_mars.cli bench iteration --device cuda --model gpt2-small \
    --batch-size 16 --repeats 20 --warmup 5 --json "$out/iteration-gpt2-small.json"
python -m torch.distributed.run --standalone --nproc_per_node "$(nvidia-smi -L | wc -l)" \
    -m torch_mars.cli bench distributed --model gpt2-small --repeats 30 --warmup 5 \
    --json "$out/distributed-gpt2-small.json"
