#!/usr/bin/env bash
# How the shipped checkpoints were trained: one GPU, three runs side by side, each a CUDA-graph training.
#   copy-200   seed 0, alphabet batching                      -> checkpoints/copy-200
#   copy-20    seeds 0-5 stacked (--replicates 6), random     -> checkpoints/copy-20 (seed 0),
#                                                                checkpoints/replicates/copy-20-s{1..5} (bf16)
#   nocopy-20  seeds 0-5 stacked (--replicates 6), random     -> checkpoints/nocopy-20, replicates/nocopy-20-s*
# Usage: scripts/gpu_checkpoints.sh launch MINUTES | wait SECONDS | ship | pack OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
LSA="python3 -m lsa_interp.cli"
RUNS=runs/gpu
COMMON=(--seed 0 --val-limit 5000 --checkpoint-every 5000)

launch() {
  mkdir -p "$RUNS"
  setsid nohup $LSA train --preset copy-200 --batching alphabet --out "$RUNS/copy-200" "${COMMON[@]}" \
    --max-minutes "$1" >"$RUNS/copy-200.log" 2>&1 < /dev/null &
  for preset in copy-20 nocopy-20; do
    setsid nohup $LSA train --preset "$preset" --batching random --replicates 6 --out "$RUNS/$preset-reps" \
      "${COMMON[@]}" --max-minutes "$1" >"$RUNS/$preset-reps.log" 2>&1 < /dev/null &
  done
}

progress() {
  for run in "$RUNS"/*/; do
    last=$(grep '"type": "step"' "$run/metrics.jsonl" 2>/dev/null | tail -1 | python3 -c \
      'import json,sys; r=json.loads(sys.stdin.read() or "{}"); print(r.get("step"), round(r.get("epoch",0),2), round(r.get("tasks_per_s",0)), round(r.get("train_loss",0),3))')
    epoch=$(grep '"type": "epoch"' "$run/metrics.jsonl" 2>/dev/null | tail -1 | cut -c1-160)
    echo "$(basename "$run"): step epoch tasks/s loss = $last | $epoch"
  done
}

wait_runs() {
  local end=$((SECONDS + $1))
  while ((SECONDS < end)) && pgrep -f "lsa_interp.cli train" >/dev/null; do
    sleep 60
    date +%T; progress
  done
  nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader || true
}

ship() {
  $LSA ship "$RUNS/copy-200" --name copy-200
  for preset in copy-20 nocopy-20; do
    $LSA ship "$RUNS/$preset-reps" --replicate 0 --name "$preset"
    for i in 1 2 3 4 5; do
      $LSA ship "$RUNS/$preset-reps" --replicate "$i" --name "replicates/$preset-s$i" --storage bf16 ||
        $LSA ship "$RUNS/$preset-reps" --replicate "$i" --name "replicates/$preset-s$i" --storage fp16 ||
        $LSA ship "$RUNS/$preset-reps" --replicate "$i" --name "replicates/$preset-s$i"
    done
  done
}

pack() {
  tar -cf - checkpoints | split -b 15M - "$1/checkpoints.tar.part-"
  tar -czf "$1/runs.tgz" "$RUNS"/*.log "$RUNS"/*/metrics.jsonl "$RUNS"/*/train_config.json
}

case "${1:-}" in
  launch) launch "$2" ;;
  wait) wait_runs "$2" ;;
  progress) progress ;;
  ship) ship ;;
  pack) pack "$2" ;;
  *) echo "usage: $0 launch MINUTES | wait SECONDS | progress | ship | pack OUT_DIR" >&2; exit 2 ;;
esac
