#!/usr/bin/env bash
# NOT RUN (written in session 23 for the next one), nvidia-h100-x2, about 170 s with the start: call 6 again on main
# with the counting block's new sub-stage (`dispatch.counts_out`: its count stores, barrier and release), at the two
# T=256 challenge shapes and at DeepSeek-V3 one token, counts drawn: does the counting block spend its 4-5 us counting,
# or waiting for its release behind the rows on the link? Nothing to carry: it builds main in place.
source tools/device_call.sh
MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=0 timeout 150 python3 setup.py build_ext --inplace --force > $L/build-prof.log 2>&1
log "build prof rc=$?"
mkdir -p $OUT/trace
PYTHONPATH=$PWD/python timeout 60 torchrun --nproc-per-node=2 benchmarks/bench_all2all.py \
  --shapes "128,8,4096,256;256,8,7168,256;256,8,7168,1" --no-graph --no-check --trace-graph 8 --systems moe_a2a \
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
