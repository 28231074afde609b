#!/usr/bin/env bash
# Session 22, call 4, nvidia-h100-x2: the whole GPU suite on main 126b49e (prefetch_y, the fixed test of dropped
# pairs); then prefetch_y against c31db22 once more at 128 tokens, every rank and drawn (world 2).
# Setup: .exp/flagged = git archive c31db22, .exp/pf = the tree of 126b49e less comments; carry both.
source tools/device_call.sh
BUILD_TIMEOUT=250 bash tools/build_trees.sh $L .:hooks .exp/flagged .exp/pf >> $OUT/driver.log
log "built rc=$?"
timeout 280 bash tools/gpu_run.sh $OUT/suite tests > $L/suite-driver.log 2>&1
log "suite rc=$?"; cp $OUT/suite/summary.txt $OUT/suite-summary.txt
AB_BUILT=1 AB_ROUNDS=2 AB_BENCH=layer AB_LAYER_ARGS="--tokens 128 --counts max;drawn --phases dispatch,combine-bwd" \
  timeout 100 bash tools/graph_ab.sh $OUT/ab-pf .exp/flagged .exp/pf > $L/ab-pf.log 2>&1
log "ab pf rc=$?"; cp $OUT/ab-pf/compare.md $OUT/compare-pf.md
cd $OUT && tar czf all.tar.gz logs suite ab-pf && rm -rf logs suite ab-pf
log done
