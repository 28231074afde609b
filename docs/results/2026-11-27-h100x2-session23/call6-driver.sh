#!/usr/bin/env bash
# Session 23, call 6, nvidia-h100-x2: a trace of main's (25b8df6) mid shapes in graph steady state, counts drawn, the
# two closest to issue 35's targets (E128-K8-H4096-T256 30.9 us against 30, E256-K8-H7168-T256 40.6 against 40):
# profiler build in place, bench_all2all --trace-graph 8, each trace's chain and summary. Nothing to carry.
source tools/device_call.sh
MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=0 timeout 150 python3 setup.py build_ext --inplace --force > $L/build-prof.log 2>&1
log "build prof rc=$?"
mkdir -p $OUT/trace
PYTHONPATH=$PWD/python timeout 60 torchrun --nproc-per-node=2 benchmarks/bench_all2all.py \
  --shapes "128,8,4096,256;256,8,7168,256" --no-graph --no-check --trace-graph 8 --systems moe_a2a \
  --no-microbench --trace $OUT/trace/trace > $OUT/trace/bench_all2all-traced.log 2>&1
log "trace rc=$?"
for f in $OUT/trace/trace-*.json; do
  n=$(basename $f .json)
  PYTHONPATH=$PWD/python python3 -m moe_a2a.trace chain $f > $OUT/chain-$n.txt 2>&1
  PYTHONPATH=$PWD/python python3 -m moe_a2a.trace summary $f > $OUT/trace/summary-$n.txt 2>&1
  gzip $f
done
log "chains done"
cd $OUT && tar czf all.tar.gz logs trace && rm -rf logs trace
log done
