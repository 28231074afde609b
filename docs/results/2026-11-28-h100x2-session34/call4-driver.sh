#!/usr/bin/env bash
# Session 34, call 4: nvidia-h100-x2, about 460 s with the start. The tree that lands (call 2's grouped_gemv kernel;
# call 3's persistent grid not kept): the whole GPU suite, then bench_hf_model.py (all three systems).
# Setup (here): .exp/{rel,hooks} = the working tree (git ls-files -co | tar), docs left out.
# carry [".exp/rel", ".exp/hooks"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/rel .exp/hooks:hooks >> $OUT/driver.log
log "built rc=$?"
bounded 330 bash -c "cd .exp/hooks && bash tools/gpu_run.sh $L/suite tests > $L/suite.log 2>&1"
log "suite rc=$?"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2> /dev/null
BENCH_TREE=.exp/rel bench hf-gemv 110 benchmarks/bench_hf_model.py
{ grep -B1 -A4 "^B/rank  prefill vs" $L/hf-gemv.log; grep -A11 "^B/rank  *system" $L/hf-gemv.log | head -12; } \
  > $OUT/hf-summary.txt
cd $OUT && tar cJf all.tar.xz logs hf-gemv 2> /dev/null; rm -rf logs hf-gemv
log done
