#!/usr/bin/env bash
# First command of a GPU session for the native stack (issue 13). On an H100, at most 9.5 minutes in all
# (each part has its own timeout): the GPU-only tests of tests/training (CUDA-graph stack = eager stack,
# compiled = plain, fresh dropout masks at every replay, bf16 with dropout trains to the end, a graphed stack
# resumes; the single-model graph step), then the
# stacking benchmark matrix (native first, bf16 first; configurations past the budget are listed as
# skipped in the JSON). Everything it prints is also written under $OUT:
#   $OUT/gpu.txt         the GPU (nvidia-smi)
#   $OUT/gpu_tests.txt   the pytest report
#   $OUT/stacking.json   every benchmark number and the hardware; $OUT/benchmark.txt its table
#   $OUT/compile.json    the native stack with torch.compile inside the step (bf16, R=8 and 64)
# Usage, from the repository root on the device machine: bash scripts/gpu_session.sh
# The image lacks transformer-lens, datasets, plotly and beartype: run scripts/gpu_wheels.sh here first and
# carry .whl; they are installed into /tmp/site once per machine.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
if [[ -d .whl && ! -d /tmp/site ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}:/tmp/site
OUT=${OUT:-runs/gpu-session}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$OUT/gpu.txt" 2>&1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/gpu.txt"
timeout 150 python3 -m pytest -q -p no:cacheprovider -rs tests/training/test_stack_graph.py \
  tests/training/test_graph_step.py 2>&1 | tee "$OUT/gpu_tests.txt" | tail -20
timeout 280 python3 -m benchmarks.train_throughput --device cuda --replicates 1,8,32,64 --stacking native,vmap \
  --precision bf16,fp32,tf32 --steps 20 --budget-minutes 3.5 --json "$OUT/stacking.json" 2>&1 |
  tee "$OUT/benchmark.txt"
timeout 120 python3 -m benchmarks.train_throughput --device cuda --replicates 8,64 --stacking native-compile \
  --precision bf16 --steps 20 --budget-minutes 1 --json "$OUT/compile.json" 2>&1 | tee -a "$OUT/benchmark.txt"
# Keep the step times on the machine for scripts/gpu_train.sh (the device tool empties $OUT before each command).
mkdir -p runs/gpu-session && cp "$OUT"/stacking.json "$OUT"/compile.json runs/gpu-session/ 2>/dev/null
true
