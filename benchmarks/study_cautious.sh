#!/usr/bin/env bash
# Cautious against plain MARS-AdamW at the `compare` budget (issue #16), with the same tuning
# effort for both: each on an lr grid spaced 1.5x around the study's winner (6.7e-3), at the
# winner's betas (0.9, 0.95) and gamma 0.05, search seed 0, the best lr on seeds 0, 1 and 2.
# Resumable: rerun to finish. Results: benchmarks/results/study-cautious/{plain,cautious}/.
set -euo pipefail
cd "$(dirname "$0")/.."
for cautious in False True; do
    name=$([ "$cautious" = True ] && echo cautious || echo plain)
    torch-mars sweep --optimizers mars-adamw --jobs "${JOBS:-2}" \
        --grid mars-adamw:lr=4.5e-3,6.7e-3,1e-2 --grid "mars-adamw:betas=(0.9,0.95)" \
        --grid mars-adamw:gamma=0.05 --grid "mars-adamw:cautious=$cautious" \
        --out-dir benchmarks/results/study-cautious --name "$name"
done
