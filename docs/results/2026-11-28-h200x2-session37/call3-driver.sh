#!/usr/bin/env bash
# Call 3 of session 37: nvidia-h200-x4 (4 x H200, lent from the middle of the session). .exp/newh (hooks) and .exp/new
# = call 2's trees (the shared expert's overlap in a capture). The whole GPU suite at world 4, then bench_hf_model.py
# (all three systems) at world 4. carry [".exp/new", ".exp/newh"].
source tools/device_call.sh
BUILD_TIMEOUT=240 bash tools/build_trees.sh $L .exp/new .exp/newh:hooks >> $OUT/driver.log
log "built rc=$?"
bounded 330 bash -c "cd .exp/newh && bash tools/gpu_run.sh $L/suite tests > $L/suite.log 2>&1"
log "suite rc=$? $(grep -E '^-- gpu_tests' $L/suite/summary.txt)"
grep -A12 "^-- gpu_tests" $L/suite/summary.txt | grep -E "FAILED|ERROR|TIMEOUT" | head -20 >> $OUT/driver.log
BENCH_TREE=.exp/new bench hf-w4 150 benchmarks/bench_hf_model.py
{ grep -B1 -A4 "^B/rank  prefill vs" $L/hf-w4.log; grep -A11 "^B/rank  *system" $L/hf-w4.log | head -12; } > $OUT/hf-summary.txt
cp $L/suite/summary.txt $OUT/suite-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs hf-w4 2> /dev/null; rm -rf logs hf-w4
log done
