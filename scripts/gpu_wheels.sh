#!/usr/bin/env bash
# Run HERE (not on the GPU machine) before a GPU session's first command: downloads, into .whl/ (git-ignored),
# the Python 3.12 wheels of what lsa_interp imports and the GPU machine's image lacks (see the device tool's
# KINDS.md package list): transformer-lens and the datasets package it imports, plotly, and beartype for the
# test hook. The device call then names `.whl` in `carry`; scripts/gpu_session.sh installs them into /tmp/site.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
for package in transformer-lens==4.3.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 plotly==7.1.0 \
  beartype==0.23.1 fancy-einsum==0.0.3 typeguard==4.6.0; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "$package"
done
du -sh .whl
