#!/bin/bash
# Everything a lent GPU machine is for, in one command (about 8 minutes on an H100 with a
# 16-core host): build both extensions, run the GPU tests, publish results/operators_cuda
# (stream-launched and CUDA-graph-replayed) and results/hybrid_gpu, and time engine=hybrid's
# host phases (bench_gpu.py timeline, with a profiler trace in OUT_DIR), from the checkout:
#
#     bash experiments/gpu_checks.sh [OUT_DIR]
#     STAGES="build tests operators" bash experiments/gpu_checks.sh   # some stages only
#
# Stages: build tests operators hybrid timeline (all by default; each later one builds the
# extensions on first use if `build` is left out). The pages go to results/ of this
# checkout; logs, run directories and the timeline files to OUT_DIR (default
# /tmp/gpu_checks). The benchmarks run through the CLI with tracking=disabled, which needs
# Hydra but not MLflow or cvxpy: a machine without Hydra gets it from wheels in .whl/
# (hydra-core, omegaconf, antlr4-python3-runtime; pure Python; experiments/gpu_wheels.sh
# puts them there), installed into /tmp/site.
# Each stage has its own time limit, so a slow one does not starve the rest; the stage
# limits add up to more than a 10-minute call: split the stages over calls where needed.
# The exit status is non-zero when a stage failed; the log says which.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
OUT_DIR=${1:-/tmp/gpu_checks}
STAGES=${STAGES:-build tests operators hybrid timeline}
mkdir -p "$OUT_DIR"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1 \
  POWERBENCH_CUDA_ARCHS=${POWERBENCH_CUDA_ARCHS:-90} MAX_JOBS=${MAX_JOBS:-16}
T0=$(date +%s)
FAILED=()
stage() { echo "== $1 at $(( $(date +%s) - T0 )) s ($(date -u +%H:%M:%S) UTC)"; }
wanted() { [[ " $STAGES " == *" $1 "* ]]; }
check() { "$@" || { local rc=$? cmd="$*"; echo "!! failed ($rc): $cmd"; FAILED+=("${cmd:0:90}"); }; }
limit() { local s=$1; shift; timeout -k 15 "$s" "$@"; }
OPS=("task.device=cuda" "task.shapes=[4096x16384,8192x28672]" "task.dtypes=[fp16]"
     "task.batches=[1,8]" "task.sparsities=[0,0.1,0.5,0.8,0.9,0.95,0.99]" "task.publish=true"
     "task.plot=false" "tracking=disabled" "rerun=true")
PARALLEL=()
python3 -c "import xdist" 2>/dev/null && PARALLEL=(-n 4)
run_stages() {
  stage machine
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)"
  if wanted build; then  # both extensions in parallel (the CPU one runs the hybrid CPU part)
    stage build
    python3 -c "from powerbench.ops import get_backend; get_backend('sparse_cpu', fallback=False)" &
    local cpu_build=$!
    check python3 -c "from powerbench.ops import get_backend; get_backend('sparse_cuda', fallback=False)"
    wait "$cpu_build" || { echo "!! failed: the sparse_cpu build"; FAILED+=("sparse_cpu build"); }
  fi
  if wanted tests; then
    stage tests
    check limit 240 python3 -m pytest -q -p no:cacheprovider "${PARALLEL[@]}" -m gpu \
      tests/ops/test_cuda.py tests/simulator/test_hybrid_engine.py tests/measure/test_hybrid_bench.py
  fi
  if wanted operators; then
    stage operators
    check limit 150 python3 -m powerbench.cli bench-operators "${OPS[@]}" hydra.run.dir="$OUT_DIR/ops"
    check limit 120 python3 -m powerbench.cli bench-operators "${OPS[@]}" \
      task.timing.cuda_graph=true task.tag=_graph "task.backends=[sparse_cuda]" \
      hydra.run.dir="$OUT_DIR/ops_graph"
  fi
  if wanted hybrid; then
    stage hybrid
    check limit 360 python3 -m powerbench.cli bench-hybrid tracking=disabled task.layers=8 \
      task.rounds=7 task.threads=8 "task.gpu_ffn_shares=[0.25,0.5]" task.publish=true \
      rerun=true hydra.run.dir="$OUT_DIR/hybrid"
  fi
  if wanted timeline; then  # a development aid: engine=hybrid's host time by phase, a trace
    stage timeline
    for part in worker inline; do
      check limit 120 python3 experiments/bench_gpu.py timeline --share 0.25 \
        --cpu-part "$part" --out-dir "$OUT_DIR"
    done
  fi
  stage done
  if (( ${#FAILED[@]} )); then
    echo "!! ${#FAILED[@]} failed:"; printf '   %s\n' "${FAILED[@]}"
    return 1
  fi
}
run_stages 2>&1 | tee "$OUT_DIR/log.txt"
