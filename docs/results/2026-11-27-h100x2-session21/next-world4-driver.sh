#!/usr/bin/env bash
# NOT RUN (written in session 21 for the next one), nvidia-h100-x4: the flagged weight gradients at world 4, main
# against 03be39f (the main before them), every rank at 128 / 512 / 2048 tokens and 0/2048/0/2048 (the sub-ranges'
# round), then the gradient tests at world 4 on main. About 300 s with the start.
# Setup (on the CPU machine, from this checkout on main):
#   for d in before flagged flaggedt; do rm -rf .exp/$d; mkdir -p .exp/$d; done
#   git archive 03be39f | tar -x -C .exp/before; git archive main | tar -x -C .exp/flagged
#   git archive main | tar -x -C .exp/flaggedt; rm -rf .exp/{before,flagged,flaggedt}/docs
# carry [".exp/before", ".exp/flagged", ".exp/flaggedt"].
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/before .exp/flagged .exp/flaggedt:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1 AB_ROUNDS=2 AB_BENCH=layer
AB_LAYER_ARGS="--tokens 128,512,2048 --phases dispatch,combine-bwd,combine-bwd-y" \
  timeout 150 bash tools/graph_ab.sh $OUT/ab .exp/before .exp/flagged > $L/ab.log 2>&1
log "ab rc=$?"; cp $OUT/ab/compare.md $OUT/compare.md
AB_LAYER_ARGS="--tokens 2048 --counts 0/2048 --phases dispatch,combine-bwd" \
  timeout 90 bash tools/graph_ab.sh $OUT/ab-0-2048 .exp/before .exp/flagged > $L/ab-0-2048.log 2>&1
log "ab 0/2048 rc=$?"; cp $OUT/ab-0-2048/compare.md $OUT/compare-0-2048.md
GPU_TESTS="tests/python/gpu/test_autograd.py tests/python/gpu/test_fuzz.py" \
  timeout 120 bash .exp/flaggedt/tools/gpu_run.sh $OUT/grad tests > $L/grad-driver.log 2>&1
log "gradient tests rc=$?"; cp $OUT/grad/summary.txt $OUT/grad-summary.txt
cd $OUT && tar czf all.tar.gz logs ab ab-0-2048 grad && rm -rf logs ab ab-0-2048 grad
log done
