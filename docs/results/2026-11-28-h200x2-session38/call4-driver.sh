#!/usr/bin/env bash
# Session 38, call 4 (nvidia-h200-x4: world 4): main 4f57e58 as landed (.exp/rel, .exp/relh with the test hooks, as
# call 1): the whole GPU suite at world 4, then bench_hf_model.py once (all three systems). About 450 s with the start.
# carry [".exp/rel", ".exp/relh"].
source tools/device_call.sh
BUILD_TIMEOUT=240 bash tools/build_trees.sh $L .exp/rel .exp/relh:hooks >> $OUT/driver.log
log "built rc=$?"
bounded 300 bash -c "cd .exp/relh && bash tools/gpu_run.sh $L/suite tests > $L/suite.log 2>&1"
log "suite rc=$? $(grep -E '^-- gpu_tests' $L/suite/summary.txt)"
grep -A12 "^-- gpu_tests" $L/suite/summary.txt | grep -E "FAILED|ERROR|TIMEOUT" | head -20 >> $OUT/driver.log
cp $L/suite/summary.txt $OUT/suite-summary.txt
BENCH_TREE=.exp/rel bench hf 110 benchmarks/bench_hf_model.py
{ grep -B1 -A4 "^B/rank  prefill vs" $L/hf.log; grep -A11 "^B/rank  *system" $L/hf.log | head -12
  grep -o '"decode_graph_shared_beside": [0-9]*' $OUT/hf/bench_hf_model.json | sort | uniq -c; } > $OUT/hf-summary.txt
cd $OUT && tar cJf all.tar.xz logs hf 2> /dev/null; rm -rf logs hf
log done
