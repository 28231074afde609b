#!/usr/bin/env bash
# Session 34, call 2: nvidia-h100-x2, about 420 s with the start. grouped_gemv as call 1 measured it: no pass of 8
# rows, and the integration's rule from the exchange's rows an expert (max_num_tokens x top-k / local experts:
# grouped_gemv up to 3, 2 rows a pass up to 1.5, else 4).
# 1. Its GPU test and test_transformers.py (the decode graph in bf16 on grouped_gemv and on torch._grouped_mm, and in
#    fp32 on grouped_gemv).
# 2. bench_experts.py on GPU 0 (rows a pass 1, 2, 4 against torch._grouped_mm, the floor in the same run).
# 3. bench_hf_model.py, all three systems, three runs: grouped_gemv on, off (MOE_A2A_GROUPED_GEMV=0), on again. In
#    call 1, (a) alone in a process ran 0.1 ms faster than (a) beside (b) and (c), so each run has all three.
# Setup (here): mkdir -p .exp/{rel,hooks}; the working tree into each (git ls-files -co | tar), docs left out.
# carry [".exp/rel", ".exp/hooks"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/rel .exp/hooks:hooks >> $OUT/driver.log
log "built rc=$?"
(cd .exp/hooks && PYTHONPATH=$PWD/python bounded 150 torchrun --nproc-per-node=2 -m pytest -q \
  tests/python/gpu/test_grouped_gemv.py tests/python/gpu/test_transformers.py) > $L/tests.log 2>&1
log "tests rc=$? $(grep -E '(passed|failed)' $L/tests.log | tail -n 1)"
(cd .exp/rel && PYTHONPATH=$PWD/python bounded 120 python3 benchmarks/bench_experts.py --json $OUT/bench_experts.json) \
  > $OUT/bench_experts.log 2>&1
log "bench_experts rc=$?"
BENCH_TREE=.exp/rel bench hf-gemv 120 benchmarks/bench_hf_model.py
MOE_A2A_GROUPED_GEMV=0 BENCH_TREE=.exp/rel bench hf-grouped_mm 120 benchmarks/bench_hf_model.py
BENCH_TREE=.exp/rel bench hf-gemv-2 120 benchmarks/bench_hf_model.py
for r in hf-gemv hf-grouped_mm hf-gemv-2; do
  echo "== $r"; grep -B1 -A4 "^B/rank  prefill vs" $L/$r.log; grep -A11 "^B/rank  *system" $L/$r.log | head -12
done > $OUT/hf-summary.txt
cd $OUT && tar cJf all.tar.xz logs hf-gemv hf-grouped_mm hf-gemv-2 2> /dev/null; rm -rf hf-gemv hf-grouped_mm hf-gemv-2
log done
