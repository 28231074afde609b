#!/usr/bin/env bash
# Prepared for the next session (not run): any kind with 2 GPUs (nvidia-h100-x2 first: nothing of grouped_gemv has run
# on H100), about 330 s with the start. .exp/rel = main's tree (9d5fb90 or later, the working tree without docs/).
# bench_experts.py with its new layer columns (the SwiGLU apart and fused; never run), then bench_hf_model.py (all
# three systems; issue 37's table on H100). carry [".exp/rel"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/rel >> $OUT/driver.log
log "built rc=$?"
(cd .exp/rel && PYTHONPATH=python bounded 150 python3 benchmarks/bench_experts.py --tokens 1,2,8,16 \
  --json $OUT/bench_experts.json > $L/bench_experts.log 2>&1)
log "bench_experts rc=$?"
tail -16 $L/bench_experts.log > $OUT/experts-summary.txt
BENCH_TREE=.exp/rel bench hf 110 benchmarks/bench_hf_model.py
{ grep -B1 -A4 "^B/rank  prefill vs" $L/hf.log; grep -A11 "^B/rank  *system" $L/hf.log | head -12; } > $OUT/hf-summary.txt
cd $OUT && tar cJf all.tar.xz logs hf 2> /dev/null; rm -rf logs hf
log done
