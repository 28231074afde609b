#!/usr/bin/env bash
# Call 2 of session 37: nvidia-h200-x2. .exp/new and .exp/newh (hooks) = the working tree with the shared expert's
# overlap launched only in a CUDA graph capture (call 1's tree launched it in eager forwards too); .exp/rel = main
# 0ad65c8. The host cost of the overlap in an eager forward (fork_join_host.py, one GPU), the whole GPU suite on the
# new tree, then bench_hf_model.py new, 0ad65c8, new. carry [".exp/new", ".exp/newh", ".exp/rel"].
source tools/device_call.sh
BUILD_TIMEOUT=240 bash tools/build_trees.sh $L .exp/new .exp/newh:hooks .exp/rel >> $OUT/driver.log
log "built rc=$?"
(cd .exp/new && CUDA_VISIBLE_DEVICES=0 PYTHONPATH=python bounded 60 python3 \
  ../../docs/results/2026-11-28-h200x2-session37/fork_join_host.py > $OUT/fork-join-host.txt 2>&1)
log "fork_join_host rc=$?"
bounded 240 bash -c "cd .exp/newh && bash tools/gpu_run.sh $L/suite tests > $L/suite.log 2>&1"
log "suite rc=$? $(grep -E '^-- gpu_tests' $L/suite/summary.txt)"
grep -A12 "^-- gpu_tests" $L/suite/summary.txt | grep -E "FAILED|ERROR|TIMEOUT" | head -20 >> $OUT/driver.log
BENCH_TREE=.exp/new bench hf-new 100 benchmarks/bench_hf_model.py
BENCH_TREE=.exp/rel bench hf-base 100 benchmarks/bench_hf_model.py
BENCH_TREE=.exp/new bench hf-new2 100 benchmarks/bench_hf_model.py
for r in hf-new hf-base hf-new2; do
  echo "== $r"; grep -B1 -A4 "^B/rank  prefill vs" $L/$r.log; grep -A11 "^B/rank  *system" $L/$r.log | head -12
done > $OUT/hf-summary.txt
cd $OUT && tar cJf all.tar.xz logs hf-new hf-base hf-new2 2> /dev/null; rm -rf logs hf-new hf-base hf-new2
log done
