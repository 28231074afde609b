#!/usr/bin/env bash
# Prepared for the next session (not run): nvidia-h100-x2 (or -h200-x2), about 520 s with the start. The tree of
# main after session 35 (237a9f7 or later): the whole GPU suite on two GPUs (session 35 ran only the tests of what it
# changed, on one GPU), then bench_hf_model.py (all three systems; issue 37's table, on H100 if the call gets one).
# Setup (here): .exp/{rel,hooks} = the working tree (git ls-files -co --exclude-standard | tar), docs left out.
# carry [".exp/rel", ".exp/hooks"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/rel .exp/hooks:hooks >> $OUT/driver.log
log "built rc=$?"
bounded 330 bash -c "cd .exp/hooks && bash tools/gpu_run.sh $L/suite tests > $L/suite.log 2>&1"
log "suite rc=$? $(grep -E '^-- gpu_tests' $L/suite/summary.txt)"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2> /dev/null
BENCH_TREE=.exp/rel bench hf 110 benchmarks/bench_hf_model.py
{ grep -B1 -A4 "^B/rank  prefill vs" $L/hf.log; grep -A11 "^B/rank  *system" $L/hf.log | head -12; } \
  > $OUT/hf-summary.txt
cd $OUT && tar cJf all.tar.xz logs hf 2> /dev/null; rm -rf logs hf
log done
