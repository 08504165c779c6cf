#!/usr/bin/env bash
# Set-up's choice of onnxruntime build, run by `make setup` after the Python dependencies.
#
#   bash scripts/pick-onnxruntime.sh VENV [--dry-run]
#
# A machine with an NVIDIA driver (a GPU listed under /proc/driver/nvidia/gpus) gets
# `onnxruntime-gpu` in place of `onnxruntime`, at the same version, so that the gate's scorer can
# use the CUDA provider. Every other machine keeps the CPU build and nothing is changed. The two
# builds install the same `onnxruntime` module and must never both be present: uninstalling one
# of them deletes files the other needs, so the swap removes both and installs the GPU build
# alone. When the GPU build is already the only one installed, nothing is done.
#
# The gate pins the provider it scored with per tier version (gate/_provider.py), so a swap is
# seen as a new provider, never as a silent change of scores.
#
# --dry-run prints the pip commands instead of running them. SEGFACTORY_NVIDIA_GPUS overrides the
# driver's GPU folder (for tests of this script on a machine without a GPU).
set -euo pipefail

VENV=${1:?usage: pick-onnxruntime.sh VENV [--dry-run]}
DRY=${2:-}
GPUS=${SEGFACTORY_NVIDIA_GPUS:-/proc/driver/nvidia/gpus}
PIP="$VENV/bin/pip"

if [ ! -d "$GPUS" ] || [ -z "$(ls -A "$GPUS" 2>/dev/null)" ]; then
    exit 0  # no NVIDIA GPU: the CPU build from pyproject.toml stays
fi

installed() {  # installed DIST: its version, or nothing
    "$VENV/bin/python" - "$1" <<'PY'
import sys
from importlib import metadata
try:
    print(metadata.version(sys.argv[1]))
except metadata.PackageNotFoundError:
    pass
PY
}

cpu=$(installed onnxruntime)
gpu=$(installed onnxruntime-gpu)
if [ -n "$gpu" ] && [ -z "$cpu" ]; then
    exit 0  # already the GPU build alone
fi
version=${cpu:-$gpu}
if [ -z "$version" ]; then
    echo "pick-onnxruntime: no onnxruntime in $VENV; run the Python set-up first" >&2
    exit 1
fi

run() {
    if [ "$DRY" = "--dry-run" ]; then
        echo "$*"
    else
        "$@"
    fi
}

echo "pick-onnxruntime: an NVIDIA GPU is present; installing onnxruntime-gpu==$version in place of the CPU build" >&2
run "$PIP" uninstall -q -y onnxruntime onnxruntime-gpu
run "$PIP" install -q "onnxruntime-gpu==$version"
