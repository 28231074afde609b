#!/usr/bin/env bash
# Where the time of dispatch + combine goes in CUDA-graph steady state, in one call on a node of two or more GPUs:
#   tools/trace_graph.sh OUT SHAPES [more benchmarks/bench_all2all.py arguments]
# Builds this checkout in place with the in-kernel profiler (MOE_A2A_PROFILE=1; TRACE_BUILT=1: it is built so
# already), traces TRACE_ITERS (default 8) iterations of each shape of SHAPES (";"-separated E,K,H,T) replayed from a
# CUDA graph (bench_all2all.py --trace-graph, each rank's count drawn as the challenge draws it unless --max-counts
# is given), and writes for each trace its chain (python3 -m moe_a2a.trace chain: every stage's span over all blocks,
# per rank, median over the iterations) to OUT/chain-<trace>.txt; its summary, each kernel's lineup (the ranks on one
# clock, iteration by iteration: lineup-<kernel>-<trace>.txt), its blocks that fall behind in most iterations
# (late-<kernel>-<trace>.txt) and the gzipped trace to OUT/trace/.
# The profiled kernels are slower than the plain ones: compare stages within a trace, and time changes with
# tools/graph_ab.sh. Leaves the extension built with the profiler. Exit status: non-zero if the build, the benchmark
# or a chain failed; 2 on a usage error or a node with fewer than two GPUs.
set -uo pipefail
usage="usage: tools/trace_graph.sh OUT SHAPES [bench_all2all.py arguments...]"
[ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
OUT=$1 SHAPES=$2
shift 2
HERE=$(cd "$(dirname "$0")/.." && pwd)
source "$HERE/tools/no_multicast_env.sh"
NGPU=$(python3 -c 'import torch; print(torch.cuda.device_count())' 2> /dev/null || echo 0)
[ "$NGPU" -ge 2 ] || { echo "tools/trace_graph.sh needs two or more GPUs (a rank each), this node has $NGPU" >&2; exit 2; }
mkdir -p "$OUT/trace"
OUT=$(cd "$OUT" && pwd)
cd "$HERE" || exit 2
status=0
if [ "${TRACE_BUILT:-0}" != 1 ]; then
  MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=0 timeout "${BUILD_TIMEOUT:-300}" python3 setup.py build_ext --inplace --force \
    > "$OUT/trace/build-profiler.log" 2>&1 || { echo "profiler build failed: $OUT/trace/build-profiler.log" >&2; exit 1; }
fi
PYTHONPATH=$HERE/python timeout "${TRACE_TIMEOUT:-300}" torchrun --nproc-per-node="$NGPU" benchmarks/bench_all2all.py \
  --shapes "$SHAPES" --no-graph --no-check --trace-graph "${TRACE_ITERS:-8}" --systems moe_a2a --no-microbench \
  --trace "$OUT/trace/trace" "$@" > "$OUT/trace/bench_all2all-traced.log" 2>&1 || status=1
for f in "$OUT"/trace/trace-*.json; do
  [ -e "$f" ] || { echo "no trace written: $OUT/trace/bench_all2all-traced.log" >&2; exit 1; }
  n=$(basename "$f" .json)
  PYTHONPATH=$HERE/python python3 -m moe_a2a.trace chain "$f" > "$OUT/chain-$n.txt" 2>&1 || status=1
  PYTHONPATH=$HERE/python python3 -m moe_a2a.trace summary "$f" > "$OUT/trace/summary-$n.txt" 2>&1 || status=1
  for k in dispatch combine; do
    PYTHONPATH=$HERE/python python3 -m moe_a2a.trace lineup "$f" --kernel $k > "$OUT/trace/lineup-$k-$n.txt" 2>&1 || status=1
    PYTHONPATH=$HERE/python python3 -m moe_a2a.trace late "$f" --kernel $k > "$OUT/trace/late-$k-$n.txt" 2>&1 || status=1
  done
  gzip -f "$f"
done
exit $status
