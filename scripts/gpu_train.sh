#!/usr/bin/env bash
# A GPU session's training (issue 14), run from the repository root on the device machine, carrying .whl:
#   bash scripts/gpu_train.sh receive
#       sets aside a part of an unfinished stack's state carried up by this call (runs/upload, cut by
#       scripts/pack_results.py upload: one part per call, the working tree being 64 MiB a call) and says
#       which parts are still to come; the last part comes with `start`.
#   bash scripts/gpu_train.sh start MINUTES [BENCH_JSON]
#       joins the parts received into runs/carry (exit 2 naming a part that is missing) and continues the
#       stack that an earlier session left unfinished (as the plain stack, from the carried state again, where
#       its compiled or triton stack fails the GPU checks below on this machine); else plans the largest stack of
#       grids/queue.toml's next unfinished runs (analyses/runs and checkpoints hold the finished ones) that
#       trains, evaluates and analyses in MINUTES, or, when none does, a stack of at most CARRY_MIB MiB of state
#       that continues over sessions (scripts/gpu_plan.py: its training stops early by the seconds of the extra
#       pack calls its models or state need);
#       a compiled stack, or one with the triton attention, trains while its GPU test runs here beside its
#       start-up (fresh dropout masks at every replay; a packed one also its losses equal to the padded stack's),
#       and is stopped for the plain stack where the test fails.
#       Trains it detached (it outlives the command while the machine stays warm) until MINUTES are up (saving
#       the state of a stack that has not finished); a sweep whose stacks all finished early is moved to
#       runs/done-K and followed by the queue's next stack while FOLLOW_MINUTES are left. Watches to about
#       9.5 minutes in all. A compiled stack loads the kernels earlier sessions compiled on this GPU kind
#       (COMPILE_CACHE_KEPT/KIND, committed) and writes those it compiles anew into runs/compile-cache
#       (lsa_interp/training/compile_cache.py).
#       BENCH_JSON: the stack step times; default benchmarks/results/stacking-KIND.json (KIND from nvidia-smi:
#       h100, h200), else runs/gpu-session/stacking.json (scripts/gpu_session.sh), else on an H200 the H100's
#       (step_times), else a 3-minute probe.
#   bash scripts/gpu_train.sh watch [SECONDS]
#       prints each stack's last step line and the driver's new lines (checks, plans, sweeps started) every 30 s
#       for SECONDS (default 540) or until the sweep has ended.
#   bash scripts/gpu_train.sh pack PART
#       bundles runs/grid, runs/session, runs/done-* (models, evaluations, metrics, plans, the drive log, the
#       states of unfinished stacks; no datasets) and runs/compile-cache once, and copies chunk group PART (0:
#       parts 00-03, 1: parts 04-07, ...) with the checksum to $OUT.
# MINUTES: the device minutes left (device status: budget_left_s / 60, read after a first call, e.g. `receive`, has
# started the machine) less 1.5 (the seconds between calls, the pack call, the close; scripts/README.md); a `start`
# that is the machine's first call takes START_MINUTES (1.5) more off. Each
# command returns well inside the device tool's 10 minutes; the next must follow within 30 s, or the machine (and
# the sweep on it) is given back.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
began=$(date +%s)
SCRIPT=$PWD/scripts/gpu_train.sh
case ${1:-} in
start | receive | watch | pack | drive) ;;
*)
  echo "usage: gpu_train.sh start MINUTES [BENCH_JSON] | receive | watch [SECONDS] | pack PART" >&2
  exit 2
  ;;
esac
if [[ -d .whl && ! -d /tmp/site ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}:/tmp/site PYTHONUNBUFFERED=1
# Overridable for a dry run (tests/test_gpu_train.py runs it on a CPU with a tiny queue).
QUEUE=${QUEUE:-grids/queue.toml}
# The finished runs (space-separated directories): the GPU sessions' records and the shipped checkpoints (runs
# trained on their own, e.g. on the CPU, count where they trained the queue's recipe: lsa_interp/sweep/done.py).
DONE=${DONE:-analyses/runs checkpoints}
# Queue runs that train elsewhere (space-separated names; the CPU machine's: scripts/cpu_runs.sh prints them): the
# planner leaves them to it as if they were done.
ELSEWHERE=${ELSEWHERE:-}
WORK=${GPU_TRAIN_DIR:-runs}
BUNDLE=${BUNDLE:-/tmp/bundle}
WATCH_EVERY=${WATCH_EVERY:-30}
# auto: whichever measured stack trains more runs: the native stack, the compiled one (its step times from
# compile-KIND.json or runs/gpu-session/compile.json beside the native stack's, when there), and the triton
# attention's and the packed stacks' (triton-KIND.json or runs/gpu-session/triton.json: `gpu_session.sh
# triton`); native, native-compile (torch.compile inside the step), native-triton, native-compile-triton,
# native-compile-packed, native-compile-triton-packed (rows packed without padding), native-eager (no CUDA
# graph: if the graphed stack's GPU tests fail). Where BENCH_JSON has no step times of STACKING (auto: of the
# native stack), they are probed.
STACKING=${STACKING:-auto}
# The state a session can carry up, in parts of one call each (64 MiB of working tree less the checkout, 44 MiB
# on 2026-12-07, and in the first call .whl, 14 MB): 100 MiB, six fp32 runs, in six or seven calls. CALL_SECONDS: the
# planner's guess of what each call beyond the first of a direction costs (a receive call, an extra pack call).
CARRY=${CARRY:-$WORK/carry}
CARRY_MIB=${CARRY_MIB:-100}
CALL_SECONDS=${CALL_SECONDS:-20}
# The chance that a carried state, kept on this project's CPU machine, is still there at the next GPU session:
# 6 of the last 8 session boundaries kept the machine (the one before 2026-11-26 19:04 did not: it lost 10.5
# epochs of a CPU run), and about 1 session in 5 is lent a GPU, so the wait is k boundaries with chance
# 0.2 x 0.8^(k-1): the state survives it with chance sum_k 0.2 x 0.8^(k-1) x 0.75^k = 0.15 / 0.4 = 0.375.
# The planner weights a continued stack's runs per minute by it once per wait.
CARRY_SURVIVAL=${CARRY_SURVIVAL:-0.4}
# What a later session trains in (MINUTES of a session of 15 device minutes): a continued stack's session count,
# and so its size, comes from it, also when this session has only a short rest (after gpu_session.sh triton).
SESSION_MINUTES=${SESSION_MINUTES:-12.5}
UPLOAD=${UPLOAD:-$WORK/upload}
# The planner's guess of a session's start-up before the first step (dataset, model, compile and capture).
STARTUP_SECONDS=${STARTUP_SECONDS:-90}
# What each GPU check (passes_its_checks) adds to the start-up of a compiled, triton or packed stack on a machine
# that has not run it yet. The checks run beside the sweep's own start-up (dataset, model, compile, capture: about
# 70 s on the H100), which they once preceded (62-92 s of pytest on the H100 for the dropout check): what is
# charged is their cost to the sweep sharing the machine with them, not yet measured on a GPU.
CHECK_SECONDS=${CHECK_SECONDS:-20}
# After a sweep whose stacks all finished, the driver plans the queue's next stack if this many minutes remain.
FOLLOW_MINUTES=${FOLLOW_MINUTES:-3}
# A mark that an earlier call of this session ran on this machine (`receive` leaves it): MINUTES read after that call
# no longer hold the machine's start. A `start` that is the machine's first call takes START_MINUTES off MINUTES (30 s
# of start on the H100, 1-2 minutes more where no H100 opens and the call goes on to an H200; scripts/README.md).
WARM_MARK=$WORK/.warm
START_MINUTES=${START_MINUTES:-1.5}
SESSION=$WORK/session
# Compiled kernels kept between sessions: the committed ones, one folder per GPU kind, and this machine's new ones.
COMPILE_CACHE_KEPT=${COMPILE_CACHE_KEPT:-benchmarks/compile-cache}
COMPILE_CACHE=$WORK/compile-cache
SWEEP=$WORK/grid
RECEIVED=${RECEIVED:-$WORK/received}
OUT=${OUT:-$WORK/out}
mkdir -p "$OUT" "$SESSION"

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

# The step times of stack kind $1 (stacking, compile, triton) on GPU kind $2 (h100, h200): the committed ones of that
# GPU, else this machine's own (runs/gpu-session/: gpu_session.sh), else on an H200 the H100's. An H200 is the H100's
# chip with faster memory (the device library's KINDS.md: 132 SMs on both; a bf16 matrix product at 769-798 TFLOP/s
# against 798, a copy at 4.3 TB/s against 3.0), so its steps should take at most the H100's: a plan from them ends
# early rather than late, where a probe costs 3 of the session's minutes and times the native stack only. Prints the
# first that exists, else the machine's own path.
step_times() {
  local documents=("benchmarks/results/$1-$2.json" "runs/gpu-session/$1.json") document
  [[ $2 == h200 ]] && documents+=("benchmarks/results/$1-h100.json")
  for document in "${documents[@]}"; do
    if [[ -f $document ]]; then
      echo "$document"
      return
    fi
  done
  echo "runs/gpu-session/$1.json"
}

# Whether this work directory's driver (`drive`: it runs the session's sweeps one after another) is running.
sweep_running() { pgrep -f "gpu_train.sh drive [0-9]+ $WORK\$" >/dev/null; }

# The driver's lines (drive.log: checks, plans, sweeps started) that no watch has printed yet, this call's or an
# earlier one's ($WORK/drive.shown counts the lines printed).
driver_news() {
  local shown=0 news
  [[ -f $WORK/drive.shown ]] && shown=$(<"$WORK/drive.shown")
  news=$(tail -n "+$((shown + 1))" "$WORK/drive.log" 2>/dev/null)
  [[ -n $news ]] || return 0
  printf '%s\n' "$news"
  echo $((shown + $(printf '%s\n' "$news" | wc -l))) >"$WORK/drive.shown"
}

# Print where the sweep stands every WATCH_EVERY seconds for $1 seconds, at least once (a watch started late in
# its second, on a loaded machine, would otherwise print nothing), until the sweep has ended.
watch_sweep() {
  local until=$(($(date +%s) + $1))
  while true; do
    date +%T
    driver_news
    for metrics in "$SWEEP"/stacks/*/metrics.jsonl; do
      [[ -f $metrics ]] && grep '"type": "step"' "$metrics" | tail -n 1 | python3 -c "$PROGRESS" "$metrics" "$SESSION/plan.json"
    done
    echo "models evaluated: $(find "$SWEEP" "$WORK"/done-* -name evaluation.json 2>/dev/null | wc -l)"
    if ! sweep_running; then
      driver_news
      echo "the sweep is not running; its log ends:"
      tail -n 15 "$SESSION/sweep.log" 2>/dev/null
      return 0
    fi
    (($(date +%s) < until)) || return 0
    sleep "$WATCH_EVERY"
  done
}

# Minutes from now until epoch second $1 (0 once it has passed).
minutes_until() { awk -v d="$1" -v n="$(date +%s)" 'BEGIN { left = (d - n) / 60; print (left > 0 ? left : 0) }'; }

# Plan the session's stack in $1 minutes with stacking $2 from the benchmark arguments in $WORK/benches; the
# runs finished in this session's earlier sweeps (WORK/done-K) count as finished, and ELSEWHERE's are left out. A
# plan that fails (the queue is finished, nothing fits) leaves no plan.json: the planner's error goes to standard
# error.
plan() {
  local done_args=() benches=() root name
  mapfile -t benches <"$WORK/benches"
  for root in $DONE; do
    [[ -d $root ]] && done_args+=(--done "$root")
  done
  for root in "$WORK"/done-*/grid; do
    [[ -d $root ]] && done_args+=(--done "$root")
  done
  for name in $ELSEWHERE; do
    done_args+=(--elsewhere "$name")
  done
  # The checks already run on this machine (a follow-on plan): a kind that passed costs this session nothing more
  # (the later sessions of a stack continued over sessions still pay it: their machines run it again); a kind that
  # failed is not planned again.
  local checks=() file kind
  for file in "$WORK"/preflight-*.txt; do
    [[ -f $file ]] || continue
    kind=${file#"$WORK"/preflight-} && kind=${kind%.txt}
    if passes_its_checks "$kind"; then checks+=(--checked "$kind"); else checks+=(--failed "$kind"); fi
  done
  python3 scripts/gpu_plan.py --queue "$QUEUE" "${done_args[@]}" "${benches[@]}" --stacking "$2" --minutes "$1" \
    --carry-mib "$CARRY_MIB" --call-seconds "$CALL_SECONDS" --carry-survival "$CARRY_SURVIVAL" \
    --session-minutes "$SESSION_MINUTES" --startup-seconds "$STARTUP_SECONDS" --check-seconds "$CHECK_SECONDS" \
    "${checks[@]}" --out "$SESSION/grid.toml" >"$SESSION/plan.part" ||
    { rm -f "$SESSION/plan.part" && return 1; }
  mv "$SESSION/plan.part" "$SESSION/plan.json" && cat "$SESSION/plan.json"
}

# Whether the stack of kind $1 (compiled, triton, triton-compiled, compiled-packed, triton-compiled-packed) passes
# its GPU checks on this machine, run once per machine into $WORK/preflight-$1.txt (each must pass, not skip): it
# draws fresh dropout masks at every graph replay (62-92 s of pytest on the H100; a stack whose masks froze would
# train a different recipe), and a packed one computes the padded stack's losses step by step (about 40 s more).
passes_its_checks() {
  local tests=("tests/training/test_stack_graph.py::test_each_graph_replay_draws_fresh_dropout_masks[0.1-$1]")
  [[ $1 == *-packed ]] &&
    tests+=("tests/training/test_stack_graph.py::test_a_packed_graph_trains_like_the_padded_one[${1%-packed}]")
  [[ -f $WORK/preflight-$1.txt ]] || timeout -k 5 240 python3 -m pytest -q -p no:cacheprovider -rA "${tests[@]}" \
    >"$WORK/preflight-$1.txt" 2>&1
  (($(grep -c '^PASSED' "$WORK/preflight-$1.txt") == ${#tests[@]}))
}

# The kind of stack that grid $1 trains (compiled, triton, triton-compiled, ...-packed; empty: the plain stack).
stack_kind() {
  local kind=
  grep -q '^compile = true' "$1" && kind=compiled
  grep -q '^attention = "triton"' "$1" && kind=triton${kind:+-compiled}
  grep -q '^packing = true' "$1" && kind=$kind-packed
  echo "$kind"
}

# The session's stack as the plain stack, after its checks failed: a carried stack ($SESSION/carried) from its
# carried state again, its saved configs (each stack's train_config.json, which a resumed stack trains by), the
# sweep's saved plan (plan.json, whose recipe the sweep compares with the grid's) and the session's grid without
# torch.compile, the triton attention and packing; else the plain stack planned afresh for the time left until
# epoch second $1.
plain_instead() {
  rm -rf "$SWEEP"
  if [[ -f $SESSION/carried ]]; then
    mkdir -p "$SWEEP" && cp -r "$CARRY/grid/." "$SWEEP/" || return 1
    sed -i -e '/^compile = true$/d' -e '/^attention = "triton"$/d' -e '/^packing = true$/d' "$SESSION/grid.toml"
    python3 -c 'import json, os, sys
def rewrite(path, change):
    document = json.load(open(path))
    change(document)
    with open(path + ".part", "w") as part:
        json.dump(document, part, indent=2)
    os.replace(path + ".part", path)
for path in sys.argv[2:]:
    rewrite(path, lambda config: config.update(compile=False, attention="sdpa", packing=False))
rewrite(sys.argv[1], lambda plan: [plan["recipe"].pop(key, None) for key in ("compile", "attention", "packing")])
' "$SWEEP/plan.json" "$SWEEP"/stacks/*/train_config.json || return 1
  else
    plan "$(minutes_until "$1")" native >/dev/null || return 1
  fi
  cp "$SESSION/plan.json" "$SESSION/grid.toml" "$OUT/" 2>/dev/null
  return 0
}

# Train the session's grid until epoch second $1. A compiled, triton or packed stack starts at once, its GPU checks
# running beside its start-up; when they fail, its sweep (a process group of its own) is stopped and the plain
# stack trains instead (plain_instead). Returns the sweep's status.
sweep_checked() {
  local deadline=$1 kind pid
  kind=$(stack_kind "$SESSION/grid.toml")
  setsid python3 -m lsa_interp sweep "$SESSION/grid.toml" --out "$SWEEP" \
    --max-minutes "$(train_minutes "$deadline")" >>"$SESSION/sweep.log" 2>&1 &
  pid=$!
  echo "$(date +%T) the ${kind:-plain} stack's sweep started"
  if [[ -n $kind ]] && ! passes_its_checks "$kind"; then
    kill -KILL -- "-$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    local instead="planning the plain stack"
    [[ -f $SESSION/carried ]] && instead="continuing it as the plain stack"
    echo "$(date +%T) the $kind stack failed its check on this GPU ($WORK/preflight-$kind.txt): stopped; $instead"
    plain_instead "$deadline" || return 1
    python3 -m lsa_interp sweep "$SESSION/grid.toml" --out "$SWEEP" --max-minutes "$(train_minutes "$deadline")" \
      >>"$SESSION/sweep.log" 2>&1
    return
  fi
  [[ -n $kind ]] && echo "$(date +%T) the $kind stack passed its check on this GPU"
  wait "$pid"
}

# Minutes the session's planned stack may train until epoch second $1: less its plan's stop_early_seconds (the
# extra pack calls its models or state need; absent in plans from before it was counted).
train_minutes() {
  python3 -c 'import json, os, sys
plan = json.load(open(sys.argv[1])) if os.path.isfile(sys.argv[1]) else {}
left = float(sys.argv[2]) - plan.get("stop_early_seconds", 0) / 60
print(f"{max(left, 0):.3f}")' "$SESSION/plan.json" "$(minutes_until "$1")"
}

# The detached driver (`drive DEADLINE WORK`): the session's sweep, training until DEADLINE (epoch seconds);
# then, while every stack of it finished and every run was evaluated (the sweep exited 0, or 1 for failed analyses
# alone: pack_results.py blockers) and FOLLOW_MINUTES remain, the queue's next stack in a new sweep (the finished
# sweep and its session move to WORK/done-K). Each sweep: sweep_checked. Says in its log why no next stack follows.
drive() {
  local deadline=$1 k status blockers left
  while :; do
    status=0
    sweep_checked "$deadline" || status=$?
    blockers=$(python3 scripts/pack_results.py blockers "$SWEEP" --status "$status") || return
    if [[ -n $blockers ]]; then
      echo "$(date +%T) no next stack: ${blockers//$'\n'/; }"
      return
    fi
    left=$(minutes_until "$deadline")
    if ! awk -v left="$left" -v need="$FOLLOW_MINUTES" 'BEGIN { exit !(left >= need) }'; then
      echo "$(date +%T) no next stack: $left minutes left, under FOLLOW_MINUTES ($FOLLOW_MINUTES)"
      return
    fi
    k=1
    while [[ -e $WORK/done-$k ]]; do k=$((k + 1)); done
    mkdir -p "$WORK/done-$k" && mv "$SWEEP" "$SESSION" "$WORK/done-$k/" && mkdir -p "$SESSION" || return
    [[ $status == 0 ]] || echo "$(date +%T) analyses failed ($WORK/done-$k/grid/failures); every run trained and was evaluated"
    echo "$(date +%T) every stack finished, $(minutes_until "$deadline") minutes left: planning the next stack"
    plan "$(minutes_until "$deadline")" "$STACKING" || return
  done
}

# Start the driver detached, training until epoch second $1, and watch it once it has said that its sweep started
# (or has ended, or after 5 s).
launch() {
  local deadline=$1 shown=0 pid tries=50
  cp "$SESSION/plan.json" "$SESSION/grid.toml" "$OUT/" 2>/dev/null
  echo "training until $(date -d "@$deadline" +%T), then the queue's next stacks while time is left"
  [[ -f $WORK/drive.shown ]] && shown=$(<"$WORK/drive.shown")
  : >>"$WORK/drive.log" # there to count before the driver's own redirection has made it
  setsid nohup bash "$SCRIPT" drive "$deadline" "$WORK" >>"$WORK/drive.log" 2>&1 </dev/null &
  pid=$!
  while ((tries-- > 0)) && kill -0 "$pid" 2>/dev/null && (($(wc -l <"$WORK/drive.log") <= shown)); do
    sleep 0.1
  done
  watch_sweep $((560 - ($(date +%s) - began)))
}

# Set aside the parts of an upload that this call carried (runs/upload/carry.*) and say which are still to come.
receive() {
  mkdir -p "$RECEIVED"
  if compgen -G "$UPLOAD/carry.*" >/dev/null; then mv "$UPLOAD"/carry.* "$RECEIVED/"; fi
  python3 scripts/pack_results.py received "$RECEIVED"
}

case ${1:-} in
receive)
  receive
  touch "$WARM_MARK"
  ;;
start)
  minutes=${2:?usage: gpu_train.sh start MINUTES [BENCH_JSON]}
  if [[ ! -f $WARM_MARK ]]; then
    minutes=$(awk -v m="$minutes" -v s="$START_MINUTES" 'BEGIN { printf "%.2f", m - s }')
    echo "the first call on this machine: MINUTES hold its start, so the sweep gets $minutes (START_MINUTES less)"
  fi
  touch "$WARM_MARK"
  receive || exit 2
  # Parts without the checksum (it comes with part 00, in the first call) are a carried stack whose first part this
  # machine never received (a machine given back between calls): planning afresh would train its runs from step 0.
  if compgen -G "$RECEIVED/carry.tar.part*" >/dev/null && [[ ! -f $RECEIVED/carry.sha256 ]]; then
    echo "gpu_train.sh: parts of a carried stack but no carry.sha256 (it comes with part 00): send part 00 again" >&2
    exit 2
  fi
  if [[ -f $RECEIVED/carry.sha256 ]]; then
    rm -rf "$CARRY"
    python3 scripts/pack_results.py unpack "$RECEIVED" --name carry --into "$CARRY" || exit 2
    rm -rf "$RECEIVED"
  fi
  deadline=$(awk -v b="$began" -v m="$minutes" 'BEGIN { printf "%d", b + 60 * m }')
  # The model number (h100 of "NVIDIA H100 80GB HBM3": H followed by digits, so not the H of HBM3).
  kind=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 | grep -o -E 'H[0-9]+' | head -n 1 | tr H h)
  export LSA_COMPILE_CACHE=$COMPILE_CACHE:$COMPILE_CACHE_KEPT/$kind
  bench=${3:-$(step_times stacking "$kind")}
  [[ -f $bench ]] || bench=runs/gpu-session/stacking.json
  probe=${STACKING/auto/native}
  if [[ ! -f $bench ]] || ! measured "$bench" "$probe"; then
    bench=$SESSION/probe.json
    timeout -k 5 200 python3 -m benchmarks.train_throughput --device cuda --replicates 1,4,8,16,32 --stacking "$probe" \
      --precision fp32,bf16 --steps 20 --budget-minutes 2.5 --json "$bench"
  fi
  benches=(--bench "$bench")
  for measured_too in compile triton; do
    document=$(step_times "$measured_too" "$kind")
    if [[ -z ${3:-} && $STACKING == auto && -f $document ]]; then benches+=(--bench "$document"); fi
  done
  printf '%s\n' "${benches[@]}" >"$WORK/benches"
  cp "$bench" "$SESSION/bench.json" 2>/dev/null
  if compgen -G "$CARRY/grid/stacks/*/state.pt" >/dev/null; then
    echo "continuing the stack carried up in $CARRY:"
    mkdir -p "$SWEEP"
    cp -r "$CARRY/grid/." "$SWEEP/"
    cp -r "$CARRY/session/." "$SESSION/"
    touch "$SESSION/carried"
  else
    plan "$(minutes_until "$deadline")" "$STACKING" || exit 2
  fi
  launch "$deadline"
  ;;
drive)
  drive "$2"
  ;;
watch)
  watch_sweep "${2:-540}"
  ;;
pack)
  part=${2:?usage: gpu_train.sh pack PART}
  if [[ ! -f $BUNDLE/bundle.sha256 ]]; then
    cp "$WORK/drive.log" "$WORK"/preflight-*.txt "$SESSION/" 2>/dev/null
    roots=()
    for root in "$SWEEP" "$SESSION" "$WORK"/done-* "$COMPILE_CACHE"; do
      [[ -d $root ]] && roots+=("$root")
    done
    python3 scripts/pack_results.py pack "${roots[@]}" --states --out "$BUNDLE" || exit 1
  fi
  cp "$BUNDLE/bundle.sha256" "$OUT/"
  for index in 0 1 2 3; do
    chunk=$(printf '%s/bundle.tar.part%02d' "$BUNDLE" $((4 * part + index)))
    [[ -f $chunk ]] && cp "$chunk" "$OUT/"
  done
  ls -l "$OUT"
  ;;
esac
