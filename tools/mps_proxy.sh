#!/usr/bin/env bash
# The one-GPU proxy timing: two ranks on one GPU, running at the same time under MPS.
#   tools/mps_proxy.sh OUT [SCRIPT [ARGS...]]   SCRIPT: benchmarks/bench_graph.py, bench_all2all.py or bench_sweep.py
# runs torchrun --nproc-per-node=2 SCRIPT --num-sms $PROXY_SMS --no-microbench --out OUT ARGS. Without SCRIPT:
# the standard proxy run, bench_graph.py --shapes ab (the challenge shapes and DeepSeek-V3 at 1 and 128
# tokens; 10 replays), the one tools/gpu_run.sh (step proxy) and tools/graph_ab.sh make.
# Without MPS two processes' kernels take turns on a GPU (time slices of milliseconds), so a
# one-GPU node can only check correctness. Under MPS (CUDA's multi-process service) they run
# side by side, each on part of the SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, PROXY_PERCENT,
# default 50) with every kernel on PROXY_SMS blocks (default 60), so both ranks' blocks are
# resident at once and wait for each other as they would on two GPUs. The peer's memory is then
# this GPU's own: no link latency, shared L2 and HBM. The times are a proxy for the kernels'
# own chain (routing, signals, placing, reduction, launches), for before/after comparisons of
# kernel changes on one machine; they are not what two GPUs measure, and no target is judged
# on them (benchmarks/README.md).
# The MPS control daemon is started with private pipe and log folders and stopped on exit;
# nothing about the GPU's settings changes (compute mode stays as it is).
set -uo pipefail
OUT=${1:?usage: tools/mps_proxy.sh OUT [SCRIPT [ARGS...]]}
shift
[ $# -eq 0 ] && set -- benchmarks/bench_graph.py --shapes ab --replays 10 --iters 30
SCRIPT=$1
shift
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
command -v nvidia-cuda-mps-control >/dev/null || { echo "mps_proxy: nvidia-cuda-mps-control not found" >&2; exit 2; }
CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d /tmp/moe_a2a_mps_pipe.XXXXXX)
CUDA_MPS_LOG_DIRECTORY=$(mktemp -d /tmp/moe_a2a_mps_log.XXXXXX)
export CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
stop_mps() {
  echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
  cp "$CUDA_MPS_LOG_DIRECTORY"/control.log "$OUT/mps_control.log" 2>/dev/null || true
}
trap stop_mps EXIT
nvidia-cuda-mps-control -d || { echo "mps_proxy: the MPS control daemon did not start" >&2; exit 2; }
source tools/no_multicast_env.sh
export MOE_A2A_TEST_ONE_GPU=1 CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=${PROXY_PERCENT:-50}
# MOE_A2A_PACKAGE_DIR: time another tree's build of the package (tools/graph_ab.sh) with these scripts.
export PYTHONPATH="${MOE_A2A_PACKAGE_DIR:-$PWD/python}${PYTHONPATH:+:$PYTHONPATH}"
torchrun --nproc-per-node=2 "$SCRIPT" --num-sms "${PROXY_SMS:-60}" --no-microbench --out "$OUT" "$@"
rc=$?
# Proof that the ranks ran as MPS clients: the server the daemon started for them.
echo get_server_list | nvidia-cuda-mps-control | sed 's/^/mps server: /'
exit $rc
