#!/usr/bin/env bash
# Session 22, call 2, nvidia-h100-x2: y asked of L2 in the backward of combine (prefetch_y: the expert side's y
# rows, where they fit in a third of L2, fetched while the link drains) against main (c31db22), the layer's eager
# rounds at 128 / 512 / 2048 tokens every rank and at 128 drawn and 0/128; then the gradient tests on it
# (test_autograd.py with the fixed test of dropped pairs, test_fuzz.py).
# Setup (on the CPU machine): .exp/flagged = git archive c31db22; .exp/pf and .exp/pft = the working tree with
# prefetch_y; each without docs/. carry [".exp/flagged", ".exp/pf", ".exp/pft"].
source tools/device_call.sh
BUILD_TIMEOUT=250 bash tools/build_trees.sh $L .exp/flagged .exp/pf .exp/pft:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1 AB_ROUNDS=2 AB_BENCH=layer
AB_LAYER_ARGS="--tokens 128,512,2048 --phases dispatch,combine-bwd,combine-bwd-y" \
  timeout 150 bash tools/graph_ab.sh $OUT/ab .exp/flagged .exp/pf > $L/ab.log 2>&1
log "ab rc=$?"; cp $OUT/ab/compare.md $OUT/compare.md
AB_LAYER_ARGS="--tokens 128 --counts drawn;0/128 --phases dispatch,combine-bwd" \
  timeout 90 bash tools/graph_ab.sh $OUT/ab128 .exp/flagged .exp/pf > $L/ab128.log 2>&1
log "ab 128 rc=$?"; cp $OUT/ab128/compare.md $OUT/compare-128.md
GPU_TESTS="tests/python/gpu/test_autograd.py tests/python/gpu/test_fuzz.py" \
  timeout 150 bash .exp/pft/tools/gpu_run.sh $OUT/grad tests > $L/grad-driver.log 2>&1
log "gradient tests rc=$?"; cp $OUT/grad/summary.txt $OUT/grad-summary.txt
cd $OUT && tar czf all.tar.gz logs ab ab128 grad && rm -rf logs ab ab128 grad
log done
