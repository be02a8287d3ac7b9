#!/usr/bin/env bash
# Run HERE before a GPU session, at no device time (about 10 minutes the first time, 6 after; needs pip's
# index): runs, on this machine's CPU, what a GPU session runs, under the GPU machine's Python 3.12 and torch
# 2.11 (the device tool's KINDS.md) instead of the project's 3.11 and 2.13, with the image's pinned versions
# and only the packages it has plus the wheels of scripts/gpu_wheels.sh. A difference between the two torch
# versions otherwise shows only on the GPU, at the price of device minutes: one did (torch 2.11 has no vmap
# rule for a dtype view, and the benchmark's vmap baseline crashed on it).
#   bash scripts/device_env_check.sh        # exit 0: every check passed; the log is in $ENV/check.log
# Checks: the GPU session's tests as far as a CPU runs them (tests/training; the models, evaluation, matching
# analysis and sweeps that gpu_train.sh runs; the planner, the dry run of gpu_train.sh, the packer) and one
# round of the stacking benchmark with every stacking. nnsight, dash and ray are not in the image: the tests
# that need them are left out.
set -euo pipefail
cd "$(dirname "$0")/.."
ENV=${DEVICE_ENV:-$HOME/.cache/lsa-interp/device-env}
PYTHON=${DEVICE_PYTHON:-}
if [[ -z $PYTHON ]]; then
  for candidate in python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12; do
    if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
      PYTHON=$candidate
      break
    fi
  done
fi
[[ -n $PYTHON ]] || { echo "device_env_check.sh: no Python 3.12 found: set DEVICE_PYTHON" >&2; exit 2; }
[[ -d .whl ]] || bash scripts/gpu_wheels.sh
if [[ ! -f $ENV/.installed ]]; then
  rm -rf "$ENV"
  "$PYTHON" -m venv "$ENV"
  # The image's versions where KINDS.md names them; the project's own constraints are for Python 3.11.
  PIP_CONSTRAINT='' "$ENV/bin/pip" install -q torch==2.11.0 numpy==2.5.2 jaxtyping==0.3.11 safetensors==0.8.0 \
    transformers==5.17.0 accelerate==1.15.0 einops scipy pandas pyarrow typer rich tqdm scikit-learn xxhash \
    fsspec pyyaml requests psutil pytest pytest-xdist hypothesis
  "$ENV/bin/pip" install -q --no-index --no-deps .whl/*.whl
  touch "$ENV/.installed"
fi
log=$ENV/check.log
"$ENV/bin/python" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__)" |
  tee "$log"
status=0
PYTHONPATH=$PWD "$ENV/bin/python" -m pytest -q -p no:cacheprovider -n 2 tests/training tests/model \
  tests/evaluation tests/analysis/test_matching.py tests/sweep tests/test_gpu_plan.py tests/test_gpu_train.py \
  tests/test_pack_results.py tests/test_evaluate.py 2>&1 | tee -a "$log" | tail -n 15 || status=1
PYTHONPATH=$PWD "$ENV/bin/python" -m benchmarks.train_throughput --device cpu --replicates 2 \
  --stacking native,vmap,native-compile,native-compile-packed --precision bf16 --steps 2 --budget-minutes 10 \
  --json "$ENV/stacking-cpu.json" 2>&1 | tee -a "$log" | grep -v Warning | tail -n 5 || status=1
if grep -q '"why"' "$ENV/stacking-cpu.json"; then
  echo "device_env_check.sh: the benchmark skipped a configuration (see $ENV/stacking-cpu.json)" >&2
  status=1
fi
exit $status
