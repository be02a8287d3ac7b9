#!/usr/bin/env bash
# A GPU session's training (issue 14), run from the repository root on the device machine, carrying .whl:
#   bash scripts/gpu_train.sh start MINUTES [BENCH_JSON]
#       continues the stack that an earlier session left unfinished, when it was carried up as runs/carry
#       (scripts/pack_results.py carry); else plans the largest stack of grids/queue.toml's next unfinished
#       runs (analyses/runs holds the finished ones) that trains, evaluates and analyses in MINUTES, or, when
#       none does, a stack of at most CARRY_MIB MiB of state that continues over sessions (scripts/gpu_plan.py);
#       a compiled stack only after its GPU test passed here (fresh dropout masks at every replay; else plain).
#       Starts its sweep detached (it outlives the command while the machine stays warm), bounded to stop
#       training when MINUTES are up (saving the stack's state), and watches it to about 9.5 minutes in all.
#       BENCH_JSON: the stack step times; default benchmarks/results/stacking-KIND.json (KIND from nvidia-smi:
#       h100, h200), else runs/gpu-session/stacking.json (scripts/gpu_session.sh), else a 3-minute probe.
#   bash scripts/gpu_train.sh watch [SECONDS]
#       prints each stack's last step line every 30 s for SECONDS (default 540) or until the sweep has ended.
#   bash scripts/gpu_train.sh pack PART
#       bundles runs/grid and runs/session (models, evaluations, metrics, plan, the states of unfinished
#       stacks; no datasets) once, and copies chunk group PART (0: parts 00-03, 1: parts 04-07, ...) with the
#       checksum to $OUT.
# MINUTES: the device minutes left (device status: budget_left_s / 60) less about 3 (the machine's start, the
# seconds between calls, the pack call). Each command returns well inside the device tool's 10 minutes; the next must follow
# within 30 s, or the machine (and the sweep on it) is given back.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
case ${1:-} in
start | watch | pack) ;;
*)
  echo "usage: gpu_train.sh start MINUTES [BENCH_JSON] | watch [SECONDS] | pack PART" >&2
  exit 2
  ;;
esac
if [[ -d .whl && ! -d /tmp/site ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}:/tmp/site PYTHONUNBUFFERED=1
# Overridable for a dry run (tests/test_gpu_train.py runs it on a CPU with a tiny queue).
QUEUE=${QUEUE:-grids/queue.toml}
DONE=${DONE:-analyses/runs}
WORK=${GPU_TRAIN_DIR:-runs}
BUNDLE=${BUNDLE:-/tmp/bundle}
WATCH_EVERY=${WATCH_EVERY:-30}
# auto: the native or the compiled stack, whichever trains more runs by the step times measured (the compiled
# stack's from compile-KIND.json or runs/gpu-session/compile.json beside the native stack's, when there);
# native, native-compile (torch.compile inside the step), native-eager (no CUDA graph: if the graphed stack's
# GPU tests fail). Where BENCH_JSON has no step times of STACKING (auto: of the native stack), they are probed.
STACKING=${STACKING:-auto}
# The state a session can carry up: 64 MiB of working tree less the checkout (about 20 MB) and .whl (14 MB).
CARRY=${CARRY:-runs/carry}
CARRY_MIB=${CARRY_MIB:-28}
# The planner's guess of a session's start-up before the first step (dataset, model, compile and capture).
STARTUP_SECONDS=${STARTUP_SECONDS:-90}
SESSION=$WORK/session
SWEEP=$WORK/grid
OUT=${OUT:-$SESSION/out}
mkdir -p "$OUT" "$SESSION"
began=$(date +%s)

PROGRESS='
import json, sys
line = sys.stdin.read().strip()
if line:
    record, plan = json.loads(line), json.load(open(sys.argv[2]))
    step, loss, rate, total = record["step"], record["train_loss"], record["tasks_per_s"], plan["steps"]
    eta = (total - step) * plan["batch_size"] * plan["replicates"] / rate / 60
    print(f"{sys.argv[1]}: step {step:,}/{total:,} ({100 * step / total:.1f}%), loss {loss:.3f}, "
          f"{rate:,.0f} tasks/s, about {eta:.1f} min of training left")'

# Whether benchmark document $1 has step times of stacking $2 (a cheap look: importing the planner here would
# cost seconds of the session's start-up, and the planner itself names a document it cannot read).
measured() {
  python3 -c 'import json, sys
runs = json.load(open(sys.argv[1])).get("runs", [])
sys.exit(not any(r.get("stacking") == sys.argv[2] for run in runs for r in run.get("results", [])))' "$1" "$2" 2>/dev/null
}

sweep_running() { pgrep -f "lsa_interp sweep $SESSION/grid.toml" >/dev/null; }

watch_sweep() {
  local until=$(($(date +%s) + $1))
  while (($(date +%s) < until)); do
    date +%T
    for metrics in "$SWEEP"/stacks/*/metrics.jsonl; do
      [[ -f $metrics ]] && grep '"type": "step"' "$metrics" | tail -n 1 | python3 -c "$PROGRESS" "$metrics" "$SESSION/plan.json"
    done
    echo "models evaluated: $(find "$SWEEP" -name evaluation.json 2>/dev/null | wc -l)"
    if ! sweep_running; then
      echo "the sweep is not running; its log ends:"
      tail -n 15 "$SESSION/sweep.log"
      return
    fi
    sleep "$WATCH_EVERY"
  done
}

# Plan the session's stack with the minutes left of $1, stacking $2, and the benchmark arguments after them.
plan() {
  local minutes=$1 stacking=$2 done_args=()
  shift 2
  minutes=$(awk -v m="$minutes" -v s="$(($(date +%s) - began))" 'BEGIN { print m - s / 60 }')
  [[ -d $DONE ]] && done_args=(--done "$DONE")
  python3 scripts/gpu_plan.py --queue "$QUEUE" "${done_args[@]}" "$@" --stacking "$stacking" --minutes "$minutes" \
    --carry-mib "$CARRY_MIB" --startup-seconds "$STARTUP_SECONDS" --out "$SESSION/grid.toml" | tee "$SESSION/plan.json"
}

# Whether the compiled stack draws fresh dropout masks at every graph replay on this machine (its GPU test,
# about 40 s; it must pass, not skip): a compiled stack whose masks froze would train a different recipe.
compiled_masks_are_fresh() {
  timeout 150 python3 -m pytest -q -p no:cacheprovider -rA \
    "tests/training/test_stack_graph.py::test_each_graph_replay_draws_fresh_dropout_masks[0.1-compiled]" \
    >"$SESSION/preflight.txt" 2>&1
  grep -q '^PASSED' "$SESSION/preflight.txt"
}

# Start the session's sweep detached, bounded to stop training when MINUTES ($1, counted from this script's
# start) are up, and watch it.
launch() {
  local sweep_minutes
  sweep_minutes=$(awk -v m="$1" -v s="$(($(date +%s) - began))" 'BEGIN { left = m - s / 60; print (left > 0 ? left : 0) }')
  cp "$SESSION/plan.json" "$SESSION/grid.toml" "$OUT/" 2>/dev/null
  echo "the sweep trains for at most $sweep_minutes minutes"
  setsid nohup python3 -m lsa_interp sweep "$SESSION/grid.toml" --out "$SWEEP" --max-minutes "$sweep_minutes" \
    >>"$SESSION/sweep.log" 2>&1 </dev/null &
  sleep 5
  watch_sweep $((560 - ($(date +%s) - began)))
}

case ${1:-} in
start)
  minutes=${2:?usage: gpu_train.sh start MINUTES [BENCH_JSON]}
  if compgen -G "$CARRY/grid/stacks/*/state.pt" >/dev/null; then
    echo "continuing the stack carried up in $CARRY:"
    mkdir -p "$SWEEP"
    cp -r "$CARRY/grid/." "$SWEEP/"
    cp -r "$CARRY/session/." "$SESSION/"
    launch "$minutes"
    exit 0
  fi
  kind=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 | grep -o 'H[0-9]*' | tr H h)
  bench=${3:-benchmarks/results/stacking-$kind.json}
  [[ -f $bench ]] || bench=runs/gpu-session/stacking.json
  probe=${STACKING/auto/native}
  if [[ ! -f $bench ]] || ! measured "$bench" "$probe"; then
    bench=$SESSION/probe.json
    timeout 200 python3 -m benchmarks.train_throughput --device cuda --replicates 1,4,8,16,32 --stacking "$probe" \
      --precision fp32,bf16 --steps 20 --budget-minutes 2.5 --json "$bench"
  fi
  benches=(--bench "$bench")
  for compiled in "benchmarks/results/compile-$kind.json" runs/gpu-session/compile.json; do
    if [[ -z ${3:-} && $STACKING == auto && -f $compiled ]]; then
      benches+=(--bench "$compiled")
      break
    fi
  done
  plan "$2" "$STACKING" "${benches[@]}" || exit 2
  if grep -q '^compile = true' "$SESSION/grid.toml" && ! compiled_masks_are_fresh; then
    echo "the compiled stack failed its check on this GPU ($SESSION/preflight.txt): planning the plain stack"
    plan "$2" native "${benches[@]}" || exit 2
  fi
  cp "$bench" "$SESSION/bench.json" 2>/dev/null
  launch "$2"
  ;;
watch)
  watch_sweep "${2:-540}"
  ;;
pack)
  part=${2:?usage: gpu_train.sh pack PART}
  if [[ ! -f $BUNDLE/bundle.sha256 ]]; then
    python3 scripts/pack_results.py pack "$SWEEP" "$SESSION" --states --out "$BUNDLE" || exit 1
  fi
  cp "$BUNDLE/bundle.sha256" "$OUT/"
  for index in 0 1 2 3; do
    chunk=$(printf '%s/bundle.tar.part%02d' "$BUNDLE" $((4 * part + index)))
    [[ -f $chunk ]] && cp "$chunk" "$OUT/"
  done
  ls -l "$OUT"
  ;;
esac
