#!/usr/bin/env bash
# Everything the GPU issues need from a CUDA machine, in one call: the Triton kernels against the
# per-tensor loop on the GPU and a captured CUDA-graph step against eager steps, the count of host
# syncs per step, then `torch-mars bench step` on GPT-2 small and large (with CUDA-graph replay
# rows), Newton-Schulz's profile and its cheaper forms (benchmarks/perf/newton_schulz_forms.py),
# `bench iteration` on GPT-2 small eager and compiled (MFU), the FSDP2 step (distributed mode) on
# every GPU of the machine under torchrun, and last the table of issue #49's targets beside the
# figures (benchmarks/perf/gpu_targets.py).
#
#   bash benchmarks/gpu_bench.sh            # everything (about 6 minutes on an H200, summed
#                                           # from its parts' runs there; not yet run whole)
#   bash benchmarks/gpu_bench.sh targets    # only the runs behind the targets, then the table
#
# Run from the repository root where torch and triton are installed. The harness's own
# dependencies (optuna, tqdm, matplotlib) are installed from a folder of wheels when missing
# (WHEELS, default .wheels): the lent H100/H200 image has torch and triton, not optuna.
# Tables go to stdout, JSON to $OUT (default runs/gpu).
set -euo pipefail
out=${OUT:-runs/gpu}
mode=${1:-all}
mkdir -p "$out"
if ! python -c "import tqdm, optuna, matplotlib" 2>/dev/null; then
    python -m pip install --no-index --find-links "${WHEELS:-.wheels}" tqdm optuna matplotlib
fi
export PYTHONPATH=src:tests${PYTHONPATH:+:$PYTHONPATH}
cli() { python -m torch_mars.cli "$@"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/device.txt"
if [ "$mode" = all ]; then
    # A failing test is reported, not fatal: the timings below are still wanted.
    python -m pytest -q -p no:cacheprovider tests/optim/test_fused_parity.py tests/optim/test_compiled_step.py \
        tests/optim/test_foreach_parity.py tests/optim/test_nonfinite_skip.py tests/train/test_step_host_cost.py \
        tests/optim/test_newton_schulz.py tests/optim/test_step_plan.py tests/optim/test_cuda_graph.py \
        tests/optim/test_symmetric_products.py 2>&1 \
        | tail -15 | tee "$out/tests.txt" || true
    python benchmarks/reliability/sync_check.py | tee "$out/sync-check.txt"
    python benchmarks/perf/host_calls.py | tee "$out/host-calls.txt"
fi
cli bench step --device cuda --model gpt2-small --repeats 50 --warmup 5 \
    --json "$out/step-gpt2-small.json" || echo "bench step failed (above); going on"
cli bench step --device cuda --model gpt2-large --repeats 20 --warmup 3 \
    --only adamw-fused muon mars-adamw-default mars-shampoo-default mars-shampoo-triangle \
    adamw-fused-graph mars-adamw-graph --json "$out/step-gpt2-large.json" || echo "bench step failed; going on"
cli bench iteration --device cuda --model gpt2-small --batch-size 16 --repeats 20 --warmup 5 \
    --compile --only adamw mars-adamw --json "$out/iteration-compiled-gpt2-small.json" \
    || echo "bench iteration --compile failed (above); going on"
if [ "$mode" = all ]; then
    python benchmarks/perf/newton_schulz_forms.py --device cuda \
        --json "$out/newton-schulz-forms.json" | tee "$out/newton-schulz-forms.txt" \
        || echo "newton_schulz_forms failed (above); going on"
    cli bench iteration --device cuda --model gpt2-small --batch-size 16 --repeats 20 \
        --warmup 5 --json "$out/iteration-gpt2-small.json"
    python -m torch.distributed.run --standalone --nproc_per_node "$(nvidia-smi -L | wc -l)" \
        -m torch_mars.cli bench distributed --model gpt2-small --repeats 30 --warmup 5 \
        --json "$out/distributed-gpt2-small.json"
fi
python benchmarks/perf/gpu_targets.py "$out" | tee "$out/targets.md"
