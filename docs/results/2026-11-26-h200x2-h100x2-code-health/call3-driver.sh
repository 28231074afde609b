#!/usr/bin/env bash
# Call 3: the final tree. Graph A/B against main of the session's start (d1c34e5); bench_graph (issue 35's shapes,
# counts max and drawn, floor and microbench) and fp8; bench_moe_layer with its floor; then the whole suite.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o; mkdir -p $O/graph $O/layer
AB_GRAPH_ARGS='--counts max;drawn' timeout 150 bash tools/graph_ab.sh $O/ab .exp/main . > $O/ab.log 2>&1
log "ab rc=$?"; cp $O/ab/compare.md $OUT/compare.md
unset PYTHONPATH
timeout 260 bash tools/gpu_run.sh $O/suite build,tests > $O/suite_driver.log 2>&1; log "suite rc=$?"
cp $O/suite/summary.txt $OUT/suite_summary.txt
export PYTHONPATH=$PWD/python
timeout 80 torchrun --nproc-per-node=2 benchmarks/bench_moe_layer.py --tokens 128,512,2048 --iters 30 --out $O/layer > $O/layer/bench_moe_layer.log 2>&1; log "layer rc=$?"
timeout 100 torchrun --nproc-per-node=2 benchmarks/bench_graph.py --shapes "8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,128;256,8,7168,4096" --counts "max;drawn" --out $O/graph > $O/graph/bench_graph.log 2>&1; log "graph rc=$?"
timeout 50 torchrun --nproc-per-node=2 benchmarks/bench_graph.py --shapes "256,8,7168,128;256,8,7168,4096" --fp8 e4m3fn --no-microbench --out $O/graph/fp8 > $O/graph/bench_fp8.log 2>&1; log "fp8 rc=$?"
python3 benchmarks/perf_report.py $O/graph --out $O/graph/perf_report.md > $O/graph/perf_report.log 2>&1; log "perf_report rc=$?"
cp $O/graph/perf_report.md $OUT/perf_report.md
tar czf $OUT/o.tar.gz -C /tmp o
log done
