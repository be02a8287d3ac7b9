#!/bin/bash
# Start, or resume, long training runs on this project's CPUs: one thread and the lowest priority each, so that a
# session's own work keeps the cores it needs. A session's background jobs end with it; run this
# again in the next session and every run continues from its last state (saved every 1,000 steps).
# The runs live outside the checkout (each session gets its work tree laid anew; the machine itself may be
# kept), in $LSA_CPU_RUNS (default ~/.local/share/lsa-interp/cpu-grid). A machine that was shut down
# keeps nothing (as the one before the session of 2026-11-26 19:04 did, 10.5 epochs into nocopy-20): then every
# run that is not shipped starts again from step 0 (same seed, same weights).
#   bash scripts/cpu_runs.sh            # start or resume the runs below, in order, one per core
#   tail -n 2 ~/.local/share/lsa-interp/cpu-grid/*/metrics.jsonl
# Runs: NAME PRESET BATCHING [SEED [ARCHITECTURE]] (default seed 0 and our hooked model; the reference's
# batches in 4 micro-batches, 5,000 val rows per epoch). At most $LSA_CPU_SLOTS run at once (default: the number of
# cores), each on $LSA_CPU_THREADS threads (default 1); a run past them waits for a later call, after an earlier run
# has finished. One run on both cores trains at 1.43 times one thread's rate while nothing else runs (199-200 against
# 140 tasks/s, nocopy-20, 2026-11-28), but a session's own work on one core stalls it: its two threads wait for each
# other, and with one core held by a busy loop it logged 21 tasks/s where it had logged 147-160. Two runs on a core
# each kept 96-117 tasks/s through whole sessions of such work (2026-11-27). So each run gets one core;
# LSA_CPU_SLOTS=1 LSA_CPU_THREADS=2 gives the first unfinished run both, for a machine left alone. (Those rates were
# measured before 2026-12-02, when the runs' nice 19 ranked them only inside their own autogroups, below: each run then
# took as large a share of the CPU as the session's own work, and the test suite ran 24.8 minutes beside two runs
# against 9.8 alone.)
# The order: the seed-0 runs issue 14 ships (copy-200 alphabet, copy-20 and nocopy-20 random); then copy-200 alphabet
# seeds 0 and 1 on a plain nn.Transformer (--architecture reference), issue 14's check of the loop beside a cell below
# the paper's interval, which the GPU queue does not hold (a GPU session can run it beside its stack,
# scripts/README.md; seed 0 draws the batches of our seed-0 run, a pure function of seed and epoch);
# then the fp32 half of the queue's precision check, copy-20 random seeds 4, 3, 2 and 1, which the GPU queue trains
# next as well, in the other order (an fp32 run there takes a whole session: a GPU session takes seed 1 first and
# this CPU seed 4); then seeds 1 and 2 of copy-200 alphabet. A finished run, shipped under
# checkpoints/replicates/ or recorded under analyses/runs/, counts as done for the GPU planner
# (lsa_interp/sweep/done.py).
#   bash scripts/cpu_runs.sh snapshot   # copy each unshipped run's records into analyses/runs/cpu/NAME, start nothing
# A machine that is replaced takes its runs' records with it (copy-20 seed 1's of 12.8 epochs, 2026-11-27, survive
# only as text in docs/results.md): `snapshot` copies each run's train_config.json and the whole lines of its
# metrics.jsonl (a run still appending may be mid-line) into the checkout, to commit (scripts/cpu_snapshot.py). It
# keeps a committed record that reaches further than a run started again, and removes the partial record of a run
# that is shipped since (its seed would count twice). A record there without an evaluation is no finished run to
# the planner (lsa_interp/sweep/done.py); the figures of `lsa-interp results --history` draw it dotted and leave it
# out of the means until it has all its epochs, and its precision check over training counts it.
set -euo pipefail
case "${1:-}" in
  "" | snapshot) ;;
  *) echo "cpu_runs.sh: unknown argument '$1'; run it without one (start or resume the runs) or with 'snapshot'" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
RUNS=${LSA_CPU_RUNS:-$HOME/.local/share/lsa-interp/cpu-grid}
LSA=${LSA:-$PWD/.venv/bin/lsa-interp}
[ -x "$LSA" ] || { echo "cpu_runs.sh: $LSA is missing: run 'make install' first" >&2; exit 2; }
SLOTS=${LSA_CPU_SLOTS:-$(nproc)}
THREADS=${LSA_CPU_THREADS:-1}
mkdir -p "$RUNS"
# Where a run stands, from the last records of its metrics.jsonl: its last finished epoch (0 before the first),
# a tab, then its last logged step and epoch, its last epoch's seen-transformation val accuracy and the hours of
# session time its training needs at its recent rate (the median of its last 10 logged windows: a window that a
# pause cut into stays one of ten; nothing before its first logged step).
run_state() {
  { tail -n 400 "$1/metrics.jsonl" 2>/dev/null || true; } | "${LSA%/lsa-interp}/python" -c '
import json, os, statistics, sys
records = [json.loads(line) for line in sys.stdin if line.strip()]
step = next((r for r in reversed(records) if r.get("type") == "step"), None)
epoch = next((r for r in reversed(records) if r.get("type") == "epoch"), None)
config_path = os.path.join(sys.argv[1], "train_config.json")
config = json.load(open(config_path)) if os.path.isfile(config_path) else {}
text = ""
if step:
    text = " (step %d, epoch %.2f" % (step["step"], step["epoch"])
    seen = epoch.get("val_acc_seen_transformations") if epoch else None
    text += "; after epoch %d: %.1f%% seen-transformation val" % (epoch["epoch"], 100 * seen) if seen is not None else ""
    rates = [r["tasks_per_s"] for r in records if r.get("type") == "step" and r.get("tasks_per_s")][-10:]
    rate, epochs = statistics.median(rates) if rates else None, config.get("epochs")
    if rate and epochs and step["epoch"] > 0:
        steps_left = (epochs - step["epoch"]) * step["step"] / step["epoch"]
        text += "; about %.1f h of training left at %.0f tasks/s" % (steps_left * config["batch_size"] / rate / 3600, rate)
    text += ")"
print(epoch["epoch"] if epoch else 0, text, sep="\t")
' "$1" 2>/dev/null || printf '0\t\n'
}
# Runs that are shipped already: those the queue counts as done (lsa_interp/sweep/done.py: a checkpoint or a
# committed run record with the queue's recipe) and any under checkpoints/replicates/ by the same name. A machine
# that was replaced keeps none of $RUNS, and without this it would train them again from step 0.
SHIPPED=$("${LSA%/lsa-interp}/python" -c '
from lsa_interp.sweep.done import finished_runs
from lsa_interp.sweep.grid import load_grid
print("\n".join(sorted(finished_runs(["analyses/runs", "checkpoints"], load_grid("grids/queue.toml")))))
')
# How many runs are alive whose command line matches $1: session leaders only (each run has a session of its own,
# setsid below), so that a child a run forks, in its moment between fork and exec or for good, is not a second run.
# (Counting every match, a run's forked child once took the last of 8 slots in CI, 2026-12-02.)
live_runs() {
  local pid count=0
  for pid in $(pgrep -f "$1"); do
    if [ "$(ps -o sid= -p "$pid" | tr -d ' ')" = "$pid" ]; then count=$((count + 1)); fi
  done
  echo "$count"
}
shipped() {
  grep -qxF "$1" <<< "$SHIPPED" || [ -f "checkpoints/replicates/$1/model.safetensors" ]
}
if [ "${1:-}" = snapshot ]; then
  for dir in "$RUNS"/*/; do
    name=$(basename "$dir")
    if [ ! -f "$dir/train_config.json" ] || [ ! -f "$dir/metrics.jsonl" ] || shipped "$name"; then continue; fi
    "${LSA%/lsa-interp}/python" scripts/cpu_snapshot.py copy "$dir" "analyses/runs/cpu/$name"
  done
  for dir in analyses/runs/cpu/*/; do
    if shipped "$(basename "$dir")"; then "${LSA%/lsa-interp}/python" scripts/cpu_snapshot.py prune "${dir%/}"; fi
  done
  exit 0
fi
# The queue's runs (our hooked model) training here now that a GPU session leaves to this CPU (ELSEWHERE): those
# past $LSA_CPU_LEAVE_EPOCHS (default 10) of their 20 epochs. A run needs about 18 hours of one core, a dozen
# sessions on a machine that is kept; this machine was replaced three times before a run finished (nocopy-20 at
# 2.16, 10.5 and 13.4 epochs; docs/results.md), so a run with further to go is left to the GPU queue too. Once a
# GPU session's record of it is committed, it counts as shipped here and this script no longer resumes it.
LEAVE_EPOCHS=${LSA_CPU_LEAVE_EPOCHS:-10}
TRAINING=()
leave_to_cpu() {  # NAME STATE (run_state's line)
  if [ "${2%%$'\t'*}" -ge "$LEAVE_EPOCHS" ]; then TRAINING+=("$1"); fi
}
# A run with no saved state here whose committed record (analyses/runs/cpu/NAME) holds a finished epoch goes after
# every run without one: started again it retraces that record (a machine of one kind trains a seed's path to the
# digit: restarted on a new machine on 2026-12-07 at 22:19, copy-20 seed 1 and copy-200 reference seed 1 logged the
# committed records' losses over their first 700 and 500 steps), and a run with no record gives a new path from its
# first epoch on, for the same hours to its last. The second pass below starts such runs where slots are left.
RETRACING=()
run() {
  local name=$1 preset=$2 batching=$3 seed=${4:-0} architecture=${5:-hooked} out=$RUNS/$1 args state recorded after=""
  if shipped "$name"; then echo "$name: shipped"; return; fi
  if [ -f "$out/model/model.safetensors" ]; then echo "$name: finished"; return; fi
  recorded=$(run_state "analyses/runs/cpu/$name")
  recorded=${recorded%%$'\t'*}
  if [ "$recorded" -gt 0 ] && [ ! -f "$out/state.pt" ]; then
    if [ -z "${SECOND_PASS:-}" ]; then RETRACING+=("$*"); return; fi
    after=" (its committed record reaches epoch $recorded: after the runs without one)"
  fi
  if [ "$(live_runs "lsa-interp train .*$out( |$)")" -gt 0 ]; then
    state=$(run_state "$out")
    echo "$name: running${state#*$'\t'}"
    [ "$architecture" = hooked ] && leave_to_cpu "$name" "$state"
    return 0
  fi
  if [ "$(live_runs "lsa-interp train .*$RUNS/")" -ge "$SLOTS" ]; then
    echo "$name: waiting (at most $SLOTS at a time)$after"
    return
  fi
  if [ ! -d "$RUNS/data-$preset" ]; then "$LSA" data generate --preset "$preset" --seed 0 --out "$RUNS/data-$preset"; fi
  if [ -f "$out/state.pt" ]; then
    args=(--resume "$out")
  else
    args=(--out "$out" --preset "$preset" --data "$RUNS/data-$preset" --batching "$batching" --seed "$seed" --device cpu
          --architecture "$architecture" --val-limit 5000 --checkpoint-every 1000 --micro-batches 4)
  fi
  # setsid gives the run a session of its own, and with the kernel's autogroups (sched_autogroup_enabled) a session
  # of its own CPU share: nice then only ranks the processes inside that session, so the run would take as much of
  # the CPU as the session's own work. Its session's autogroup gets nice 19 as well (last: from then on a busy
  # machine may leave the run waiting).
  OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS setsid nohup nice -n 19 sh -c \
    '{ echo 19 > /proc/self/autogroup; } 2> /dev/null; exec "$0" "$@"' "$LSA" train "${args[@]}" \
    >> "$RUNS/$name.log" 2>&1 < /dev/null &
  echo "$name: started (pid $!)$after"
  [ "$architecture" = hooked ] && leave_to_cpu "$name" "$(run_state "$out")"
  return 0
}
run copy-200-alphabet-s0 copy-200 alphabet
run copy-20-random-s0 copy-20 random
run nocopy-20-random-s0 nocopy-20 random
run copy-200-alphabet-reference-s0 copy-200 alphabet 0 reference
run copy-200-alphabet-reference-s1 copy-200 alphabet 1 reference
for seed in 4 3 2 1; do run "copy-20-random-s$seed" copy-20 random "$seed"; done
run copy-200-alphabet-s1 copy-200 alphabet 1
run copy-200-alphabet-s2 copy-200 alphabet 2
SECOND_PASS=1
for retracing in "${RETRACING[@]}"; do run $retracing; done
if [ ${#TRAINING[@]} -gt 0 ]; then
  echo "a GPU session leaves these to this CPU: ELSEWHERE=\"${TRAINING[*]}\" bash scripts/gpu_train.sh start MINUTES"
else
  echo "no run here is past epoch $LEAVE_EPOCHS: a GPU session leaves none to this CPU (no ELSEWHERE)"
fi
