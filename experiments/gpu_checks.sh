#!/bin/bash
# Everything a lent GPU machine is for, in one command (about 8 minutes on an H100 with a
# 16-core host): build both extensions, run the GPU tests, publish results/operators_cuda
# (stream-launched and CUDA-graph-replayed) and results/hybrid_gpu, and time engine=hybrid's
# host phases (bench_gpu.py timeline, with a profiler trace in OUT_DIR). Run from the checkout:
#
#     bash experiments/gpu_checks.sh [OUT_DIR]
#
# The pages go to results/ of this checkout; logs and run directories to OUT_DIR
# (default /tmp/gpu_checks). The benchmarks run through the CLI with tracking=disabled,
# which needs Hydra but not MLflow or cvxpy: a machine without Hydra gets it from wheels in
# .whl/ (hydra-core, omegaconf, antlr4-python3-runtime; pure Python), installed into
# /tmp/site. Each stage has its own time limit, so a slow one does not starve the rest.
set -u
OUT_DIR=${1:-/tmp/gpu_checks}
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
stage() { echo "== $1 at $(( $(date +%s) - T0 )) s ($(date -u +%H:%M:%S) UTC)"; }
OPS=("task.device=cuda" "task.shapes=[4096x16384,8192x28672]" "task.dtypes=[fp16]"
     "task.batches=[1,8]" "task.sparsities=[0,0.1,0.5,0.8,0.9,0.95,0.99]" "task.publish=true"
     "task.plot=false" "tracking=disabled" "rerun=true")
{
stage machine
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)"
stage build  # the two extensions in parallel (the CPU one serves the hybrid engine's CPU part)
python3 -c "from powerbench.ops import get_backend; get_backend('sparse_cpu', fallback=False)" &
python3 -c "from powerbench.ops import get_backend; get_backend('sparse_cuda', fallback=False)"
wait
stage tests
timeout 240 python3 -m pytest -q -p no:cacheprovider -n 4 -m gpu tests/ops/test_cuda.py \
  tests/simulator/test_hybrid_engine.py tests/measure/test_hybrid_bench.py
stage operators
timeout 150 python3 -m powerbench.cli bench-operators "${OPS[@]}" hydra.run.dir="$OUT_DIR/ops"
timeout 120 python3 -m powerbench.cli bench-operators "${OPS[@]}" task.timing.cuda_graph=true \
  task.tag=_graph "task.backends=[sparse_cuda]" hydra.run.dir="$OUT_DIR/ops_graph"
stage hybrid
timeout 300 python3 -m powerbench.cli bench-hybrid tracking=disabled task.layers=8 \
  task.rounds=7 task.threads=8 "task.gpu_ffn_shares=[0.25,0.5]" task.publish=true rerun=true \
  hydra.run.dir="$OUT_DIR/hybrid"
stage timeline  # a development aid: engine=hybrid's host time by phase, and a profiler trace
for part in worker inline; do
  timeout 120 python3 experiments/bench_gpu.py timeline --share 0.25 --cpu-part $part \
    --out-dir "$OUT_DIR"
done
stage done
} 2>&1 | tee "$OUT_DIR/log.txt"
