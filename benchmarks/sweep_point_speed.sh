#!/usr/bin/env bash
# A sweep point against the same single compare run (issue #13): wall time and training time,
# three interleaved pairs on the tiny GPT. Needs a text file at /tmp/sw_corpus.txt (any text).
set -e
COMMON="--model tiny --steps 150 --batch-size 8 --block-size 32 --eval-interval 50 --eval-batches 4 --data /tmp/sw_corpus.txt"
for i in 1 2 3; do
  s=$(date +%s.%N); torch-mars compare $COMMON --optimizers adamw --lr adamw=3e-3 --out-dir runs --name c$i --quiet > /dev/null; e=$(date +%s.%N)
  echo "compare $i $(echo "$e - $s" | bc) $(python -c "import json;print(json.load(open('runs/c$i/adamw-seed0/summary.json'))['train_time_s'])")"
  s=$(date +%s.%N); torch-mars sweep $COMMON --grid adamw:lr=3e-3 --seeds 0 --out-dir runs --name s$i > /dev/null; e=$(date +%s.%N)
  echo "sweep1 $i $(echo "$e - $s" | bc) $(python -c "import json;print(json.load(open('runs/s$i/runs/adamw/lr=0.003-seed0/summary.json'))['train_time_s'])")"
done
