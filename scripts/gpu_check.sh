#!/usr/bin/env bash
# The trainer side on a GPU, in one pass (reports/gpu_check.md holds what it printed):
#   1. bench/bench_writer.py: RunWriter.log_step on a bf16 step of four 4096x4096 matmuls against
#      no logging and .item() per value, on an otherwise idle machine (run first for that reason);
#   2. the writer's, torch helpers' and reference trainer's tests (their CUDA cases run here);
#   3. the reference corpus trained on CUDA (scripts/make_fixtures.py --device cuda), packed into
#      $OUT/cuda-runs.tgz to be scored on any machine:
#        python -m forensics.verdicts.evaluation cuda=<unpacked>/cuda-runs
#   4. bench/bench_fleet.py on the local pool with every core (the cluster projection checked
#      against a machine with more cores than the 2 of the budget's).
# Usage, from the repository root on a machine with CUDA, torch and the runtime dependencies:
#   OUT=/some/folder scripts/gpu_check.sh        (PYTHON=... to use another interpreter than python3)
set -uo pipefail
OUT=${OUT:-/tmp/gpu-check}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
step() { echo; echo "== $* ($(date -u +%H:%M:%S))"; }

step machine
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$PY" -c 'import sys, torch, numpy; print("python", sys.version.split()[0], "torch", torch.__version__,
            "cuda", torch.version.cuda, "numpy", numpy.__version__, "cores", __import__("os").cpu_count())'

step writer bench
timeout 180 "$PY" bench/bench_writer.py --steps 2000 --repeat 5 --gpu-steps 1000 | tee "$OUT/bench_writer.txt"

step tests
timeout 240 "$PY" -m pytest -p no:cacheprovider -rs tests/test_writer.py tests/test_torch_helpers.py \
    tests/test_reference.py 2>&1 | tail -8 | tee "$OUT/tests.txt"

step reference corpus on CUDA
rm -rf /tmp/cuda-runs
timeout 300 "$PY" scripts/make_fixtures.py --device cuda --out /tmp/cuda-runs --jobs 10 2>&1 | tail -25
tar czf "$OUT/cuda-runs.tgz" -C /tmp cuda-runs && ls -la "$OUT/cuda-runs.tgz"

step fleet on every core
timeout 240 "$PY" bench/bench_fleet.py --engines local --runs 1000 --cluster-cores 16 64 \
    2>&1 | tee "$OUT/bench_fleet.txt"
