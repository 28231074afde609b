#!/usr/bin/env bash
# Call 1 of session 37: nvidia-h200-x2. .exp/new and .exp/newh (hooks) = the working tree with the shared expert on a
# side stream (moe_a2a.integrations.shared_overlap); .exp/rel = main 0ad65c8. The whole GPU suite on the new tree
# (0ad65c8's refactor and the overlap's tests), bench_hf_model.py new, 0ad65c8, new (all three systems each run; issue
# 37's table), then bench_experts.py's layer columns (never run before). carry [".exp/new", ".exp/newh", ".exp/rel"].
source tools/device_call.sh
BUILD_TIMEOUT=240 bash tools/build_trees.sh $L .exp/new .exp/newh:hooks .exp/rel >> $OUT/driver.log
log "built rc=$?"
bounded 240 bash -c "cd .exp/newh && bash tools/gpu_run.sh $L/suite tests > $L/suite.log 2>&1"
log "suite rc=$? $(grep -E '^-- gpu_tests' $L/suite/summary.txt)"
grep -A12 "^-- gpu_tests" $L/suite/summary.txt | grep -E "FAILED|ERROR|TIMEOUT" | head -20 >> $OUT/driver.log
BENCH_TREE=.exp/new bench hf-new 100 benchmarks/bench_hf_model.py
BENCH_TREE=.exp/rel bench hf-base 100 benchmarks/bench_hf_model.py
BENCH_TREE=.exp/new bench hf-new2 100 benchmarks/bench_hf_model.py
for r in hf-new hf-base hf-new2; do
  echo "== $r"; grep -B1 -A4 "^B/rank  prefill vs" $L/$r.log; grep -A11 "^B/rank  *system" $L/$r.log | head -12
done > $OUT/hf-summary.txt
(cd .exp/new && PYTHONPATH=python bounded 100 python3 benchmarks/bench_experts.py --tokens 1,2,8,16 \
  --json $OUT/bench_experts.json > $L/bench_experts.log 2>&1)
log "bench_experts rc=$?"
tail -16 $L/bench_experts.log > $OUT/experts-summary.txt
cd $OUT && tar cJf all.tar.xz logs hf-new hf-base hf-new2 2> /dev/null; rm -rf logs hf-new hf-base hf-new2
log done
