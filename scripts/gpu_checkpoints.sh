#!/usr/bin/env bash
# How the shipped checkpoints are trained on a lent GPU, where one command may run 10 minutes: each call
# trains (or resumes) one run in the foreground for at most MINUTES; repeat until it reports 20 epochs.
#   copy-200        seed 0, alphabet batching                     -> checkpoints/copy-200
#   copy-20         seed 0, random batching                       -> checkpoints/copy-20
#   nocopy-20       seed 0, random batching                       -> checkpoints/nocopy-20
#   copy-20-reps    seeds 1-5 stacked (--replicates 5)            -> checkpoints/replicates/copy-20-s{1..5} (bf16)
#   nocopy-20-reps  seeds 1-5 stacked (--replicates 5)            -> checkpoints/replicates/nocopy-20-s{1..5}
# Runs started here use the reference's random batches (the default); the shipped copy-200 was trained with
# the length-bucketed batches that were the default before (see docs/training.md).
# Usage: scripts/gpu_checkpoints.sh train RUN MINUTES | progress | ship RUN
# A dataset generated elsewhere can be copied to runs/gpu/PRESET-data first (it is used when present).
set -euo pipefail
cd "$(dirname "$0")/.."
# The GPU image lacks some of what lsa_interp imports (transformer-lens, ...): the wheels carried in .whl
# (scripts/gpu_wheels.sh), installed once per machine, as gpu_session.sh and gpu_train.sh do.
if [[ -d .whl && ! -d /tmp/site ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}:/tmp/site
LSA="python3 -m lsa_interp"
RUNS=runs/gpu

train() {
  local run=$1 minutes=$2 preset=${1%-reps} batching=random extra=(--seed 0)
  [[ $preset == copy-200 ]] && batching=alphabet
  [[ $run == *-reps ]] && extra=(--seed 1 --replicates 5)
  if [[ -f $RUNS/$run/train_config.json ]]; then
    $LSA train --resume "$RUNS/$run" --max-minutes "$minutes"
    return
  fi
  local data=()
  [[ -d $RUNS/$preset-data ]] && data=(--data "$RUNS/$preset-data")
  mkdir -p "$RUNS"
  $LSA train --preset "$preset" "${data[@]}" --batching "$batching" "${extra[@]}" --out "$RUNS/$run" \
    --val-limit 5000 --checkpoint-every 5000 --max-minutes "$minutes"
}

progress() {
  for metrics in "$RUNS"/*/metrics.jsonl; do
    echo "$(dirname "$metrics"): $(grep '"type": "step"' "$metrics" | tail -1 | cut -c1-160)"
  done
}

ship() {
  local run=$1 preset=${1%-reps}
  if [[ $run != *-reps ]]; then
    $LSA ship "$RUNS/$run" --name "$preset" --force
    return
  fi
  for i in 0 1 2 3 4; do
    local name="replicates/$preset-s$((i + 1))"
    $LSA ship "$RUNS/$run" --replicate "$i" --name "$name" --storage bf16 --force ||
      $LSA ship "$RUNS/$run" --replicate "$i" --name "$name" --force
  done
}

case "${1:-}" in
  train) train "$2" "$3" ;;
  progress) progress ;;
  ship) ship "$2" ;;
  *) echo "usage: $0 train RUN MINUTES | progress | ship RUN" >&2; exit 2 ;;
esac
