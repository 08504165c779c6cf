#!/usr/bin/env bash
# The GPU check: run it from the repository root on a fresh machine with an NVIDIA GPU, as root
# (set-up installs system packages and starts dockerd) or as a user with bwrap and docker access.
#
#   bash scripts/gpu-check.sh            # or: make gpu-check
#
# Steps: set-up (make setup), the GPU tests (the CPU specification and the real-GPU tests), sandbox
# verify with the GPU assigned on both backends, a short `--profile default` run on a fresh home,
# and benchmarks/bench_gpu.py. Every step's output goes to $GPU_CHECK_OUT (default
# gpu-check-<UTC time>/); the script ends with one summary block. Sized to finish in under 8
# minutes on one data-centre GPU with the pip wheels at hand. It exits 1 when any step failed.
set -uo pipefail
cd "$(dirname "$0")/.."

OUT=${GPU_CHECK_OUT:-gpu-check-$(date -u +%Y%m%dT%H%M%SZ)}
RUN_WALL=${GPU_CHECK_WALL:-3m}  # the short default-profile run: one or two tickets on one GPU
BIN=.venv/bin
SF="$BIN/python -m segfactory"
started=$(date +%s)
results=()
failed=0

step() {  # step NAME COMMAND...: run it, output to $OUT/NAME.log, record ok/FAILED and seconds
    local name=$1
    shift
    local t0
    t0=$(date +%s)
    echo "gpu-check: $name ..."
    if "$@" >"$OUT/$name.log" 2>&1; then
        results+=("$(printf '%-16s ok      %4ss' "$name" $(($(date +%s) - t0)))")
    else
        results+=("$(printf '%-16s FAILED  %4ss  (see %s)' "$name" $(($(date +%s) - t0)) "$OUT/$name.log")")
        failed=1
    fi
}

if ! command -v nvidia-smi >/dev/null || [ ! -d /proc/driver/nvidia/gpus ]; then
    echo "gpu-check: no NVIDIA driver on this machine (no nvidia-smi or /proc/driver/nvidia/gpus); nothing to check" >&2
    exit 2
fi
mkdir -p "$OUT"

step setup make setup
step gpu-tests "$BIN/pytest" -q -p no:cacheprovider tests/sandbox/test_gpu.py tests/sandbox/test_gpu_real.py \
    tests/runner/test_scheduler.py tests/agents/test_default_profile.py tests/benchmarks/test_bench_gpu.py
step verify-bwrap $SF sandbox verify --backend bwrap
if docker info >/dev/null 2>&1; then
    step verify-docker $SF sandbox verify --backend docker
else
    results+=("$(printf '%-16s skipped       (the Docker engine does not answer)' verify-docker)")
fi
HOME_DIR="$OUT/home"
step init $SF init --profile default --home "$HOME_DIR"
step run $SF run --profile default --wall "$RUN_WALL" --home "$HOME_DIR" --json
step bench "$BIN/python" benchmarks/bench_gpu.py

gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
echo
echo "== segfactory gpu-check summary =="
echo "gpu               $gpu"
echo "when              $(date -u +%FT%TZ), $(($(date +%s) - started)) s in all, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "commit            $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
for line in "${results[@]}"; do echo "step              $line"; done
if [ -s "$OUT/run.log" ]; then
    tail -1 "$OUT/run.log" | "$BIN/python" -c '
import json, sys
try:
    s = json.loads(sys.stdin.read())
except ValueError:
    sys.exit(0)
print(f"run               {s.get(\"run_id\")}: {s.get(\"tickets_run\")} tickets, {s.get(\"device_seconds\", 0):.0f} device-s; "
      f"stopped: {s.get(\"stop_reason\") or \"done\"}")
print(f"report            {s.get(\"report_html\")}")'
fi
if [ -s "$OUT/bench.log" ]; then
    sed -n '/== bench_gpu summary ==/,$p' "$OUT/bench.log" | tail -n +2 | sed 's/^/bench  /'
fi
echo "logs              $OUT/"
exit $failed
