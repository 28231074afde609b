#!/usr/bin/env bash
# Session 22, call 3, nvidia-h100-x4: world 4. (1) The flagged weight gradients (c31db22) against 03be39f (the main
# before them), every rank at 128 / 512 / 2048 tokens and 0/2048/0/2048; (2) prefetch_y (the working tree) against
# c31db22 at 128 tokens every rank and drawn; (3) the gradient tests at world 4 on the working tree.
# Setup (on the CPU machine): .exp/before = git archive 03be39f, .exp/flagged = git archive c31db22, .exp/pf and
# .exp/pft = the working tree with prefetch_y; each without docs/.
# carry [".exp/before", ".exp/flagged", ".exp/pf", ".exp/pft"].
source tools/device_call.sh
BUILD_TIMEOUT=250 bash tools/build_trees.sh $L .exp/before .exp/flagged .exp/pf .exp/pft:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1 AB_ROUNDS=2 AB_BENCH=layer
AB_LAYER_ARGS="--tokens 128,512,2048 --phases dispatch,combine-bwd,combine-bwd-y" \
  timeout 170 bash tools/graph_ab.sh $OUT/ab .exp/before .exp/flagged > $L/ab.log 2>&1
log "ab rc=$?"; cp $OUT/ab/compare.md $OUT/compare.md
AB_LAYER_ARGS="--tokens 2048 --counts 0/2048 --phases dispatch,combine-bwd" \
  timeout 90 bash tools/graph_ab.sh $OUT/ab-0-2048 .exp/before .exp/flagged > $L/ab-0-2048.log 2>&1
log "ab 0/2048 rc=$?"; cp $OUT/ab-0-2048/compare.md $OUT/compare-0-2048.md
AB_LAYER_ARGS="--tokens 128 --counts max;drawn --phases dispatch,combine-bwd" \
  timeout 90 bash tools/graph_ab.sh $OUT/ab-pf .exp/flagged .exp/pf > $L/ab-pf.log 2>&1
log "ab pf rc=$?"; cp $OUT/ab-pf/compare.md $OUT/compare-pf.md
GPU_TESTS="tests/python/gpu/test_autograd.py tests/python/gpu/test_fuzz.py" \
  timeout 150 bash .exp/pft/tools/gpu_run.sh $OUT/grad tests > $L/grad-driver.log 2>&1
log "gradient tests rc=$?"; cp $OUT/grad/summary.txt $OUT/grad-summary.txt
cd $OUT && tar czf all.tar.gz logs ab ab-0-2048 ab-pf grad && rm -rf logs ab ab-0-2048 ab-pf grad
log done
