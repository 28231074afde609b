#!/usr/bin/env bash
# Session 21, call 2 (written in session 20), nvidia-h100-x2: branch wip/cbwd-subranges-gate (the sub-ranges'
# instance runs their round only where some rank splits, else the plain round inlined apart; compile-checked only)
# against main, in an engine built for 2048 tokens a rank (bench_moe_layer --capacity 2048), then its gradient tests.
# Setup (on the CPU machine, from this checkout on main):
#   for d in base gate gatet; do rm -rf .exp/$d; mkdir -p .exp/$d; done
#   git archive main | tar -x -C .exp/base; git archive wip/cbwd-subranges-gate | tar -x -C .exp/gate
#   git archive wip/cbwd-subranges-gate | tar -x -C .exp/gatet; rm -rf .exp/{base,gate,gatet}/docs
# carry [".exp/base", ".exp/gate", ".exp/gatet"]. About 400 s of device time with the start.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
L=$OUT/logs; mkdir -p $L
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/base .exp/gate .exp/gatet:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1 AB_ROUNDS=2 AB_BENCH=layer
# 1. Small rounds in a large engine: main runs the sub-ranges' instance there (nothing splits); the branch should
#    run the plain round and match main built for each T (session 20, call 3: 33.7-33.9 / 76.1 us).
AB_LAYER_ARGS="--capacity 2048 --tokens 128,512 --phases dispatch,combine-bwd,combine-bwd-y" \
  timeout 130 bash tools/graph_ab.sh $OUT/ab-small .exp/base .exp/gate > $L/ab-small.log 2>&1
log "ab small rc=$?"; cp $OUT/ab-small/compare.md $OUT/compare-small.md
# 2. 2048 tokens: 0/2048 must keep the sub-ranges' gain; every rank runs the plain round on the branch.
AB_LAYER_ARGS="--tokens 2048 --counts 0/2048;max --phases dispatch,combine-bwd,combine-bwd-y" \
  timeout 130 bash tools/graph_ab.sh $OUT/ab-2048 .exp/base .exp/gate > $L/ab-2048.log 2>&1
log "ab 2048 rc=$?"; cp $OUT/ab-2048/compare.md $OUT/compare-2048.md
# 3. The gradient tests on the branch.
GPU_TESTS="tests/python/gpu/test_autograd.py tests/python/gpu/test_fuzz.py" \
  timeout 90 bash .exp/gatet/tools/gpu_run.sh $OUT/grad tests > $L/grad-driver.log 2>&1
log "gradient tests rc=$?"; cp $OUT/grad/summary.txt $OUT/grad-summary.txt
cd $OUT && tar czf all.tar.gz logs ab-small ab-2048 grad && rm -rf logs ab-small ab-2048 grad
log done
