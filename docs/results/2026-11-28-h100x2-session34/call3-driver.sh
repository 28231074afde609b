#!/usr/bin/env bash
# Session 34, call 3: nvidia-h100-x2, about 360 s with the start. grouped_gemv as a persistent grid: as many blocks as
# are resident, each listing the experts with rows and taking every gridDim.x-th tile of them (.exp/rel), against
# call 2's block a tile of every expert (.exp/old), in the same call.
# 1. Its GPU test and test_transformers.py on the new kernel (.exp/hooks).
# 2. bench_experts.py on GPU 0, old then new then old (1 to 16 tokens a rank).
# 3. bench_hf_model.py on the new kernel, all three systems.
# Setup (here): .exp/old = call 2's .exp/rel; .exp/{rel,hooks} = the working tree (git ls-files -co | tar), docs left
# out. carry [".exp/old", ".exp/rel", ".exp/hooks"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/old .exp/rel .exp/hooks:hooks >> $OUT/driver.log
log "built rc=$?"
(cd .exp/hooks && PYTHONPATH=$PWD/python bounded 150 torchrun --nproc-per-node=2 -m pytest -q \
  tests/python/gpu/test_grouped_gemv.py tests/python/gpu/test_transformers.py) > $L/tests.log 2>&1
log "tests rc=$? $(grep -E '(passed|failed)' $L/tests.log | tail -n 1)"
for t in old rel old-2; do
  (cd .exp/${t%-2} && PYTHONPATH=$PWD/python bounded 90 python3 benchmarks/bench_experts.py --tokens 1,2,4,8,16 \
    --json $OUT/bench_experts-$t.json) > $OUT/bench_experts-$t.log 2>&1
  log "bench_experts $t rc=$?"
done
BENCH_TREE=.exp/rel bench hf-gemv 120 benchmarks/bench_hf_model.py
{ grep -B1 -A4 "^B/rank  prefill vs" $L/hf-gemv.log; grep -A11 "^B/rank  *system" $L/hf-gemv.log | head -12; } \
  > $OUT/hf-summary.txt
cd $OUT && tar cJf all.tar.xz logs hf-gemv 2> /dev/null; rm -rf hf-gemv
log done
