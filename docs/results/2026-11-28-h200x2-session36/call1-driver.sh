#!/usr/bin/env bash
# Call 1 of session 36 (prepared in session 35 as its next-driver-suite-hf.sh; ran on nvidia-h200-x2), about 520 s
# with the start. The tree of
# main after session 35 (237a9f7 or later): the whole GPU suite on two GPUs (session 35 ran only the tests of what it
# changed, on one GPU), then bench_hf_model.py (all three systems; issue 37's table, on H100 if the call gets one),
# then bench_hf_model.py with unequal batches per rank (--batches 1:8,8:64,1:64, new in session 35, never run).
# Setup (here): .exp/{rel,hooks} = the working tree (git ls-files -co --exclude-standard | tar), docs left out.
# carry [".exp/rel", ".exp/hooks"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/rel .exp/hooks:hooks >> $OUT/driver.log
log "built rc=$?"
bounded 330 bash -c "cd .exp/hooks && bash tools/gpu_run.sh $L/suite tests > $L/suite.log 2>&1"
log "suite rc=$? $(grep -E '^-- gpu_tests' $L/suite/summary.txt)"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2> /dev/null
BENCH_TREE=.exp/rel bench hf 110 benchmarks/bench_hf_model.py
BENCH_TREE=.exp/rel bench hf-unequal 120 benchmarks/bench_hf_model.py --batches 1:8,8:64,1:64
for r in hf hf-unequal; do
  echo "== $r"; grep -B1 -A4 "^B/rank  prefill vs" $L/$r.log; grep -A11 "^B/rank  *system" $L/$r.log | head -12
done > $OUT/hf-summary.txt
cd $OUT && tar cJf all.tar.xz logs hf hf-unequal 2> /dev/null; rm -rf logs hf hf-unequal
log done
