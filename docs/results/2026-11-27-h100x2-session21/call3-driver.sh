#!/usr/bin/env bash
# Session 21, call 3, nvidia-h100-x2: branch wip/cbwd-subranges-apart (the sub-ranges' instance runs the plain
# sends and answers, inlined apart, where nothing splits, decided from what each step knows anyway: no count read
# added before the sends) against main, then its gradient tests.
# Setup (on the CPU machine, from this checkout):
#   for d in base apart apartt; do rm -rf .exp/$d; mkdir -p .exp/$d; done
#   git archive main | tar -x -C .exp/base; git archive wip/cbwd-subranges-apart | tar -x -C .exp/apart
#   git archive wip/cbwd-subranges-apart | tar -x -C .exp/apartt; rm -rf .exp/{base,apart,apartt}/docs
# carry [".exp/base", ".exp/apart", ".exp/apartt"].
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
L=$OUT/logs; mkdir -p $L
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/base .exp/apart .exp/apartt:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1 AB_ROUNDS=2 AB_BENCH=layer
# 1. Small rounds in an engine built for 2048 tokens a rank: main runs the sub-ranges' code there (calls 1-2:
#    36.5 / 35.4-35.9 us at 128 against 33.7-34.5 in an engine of 128); the branch should match the small engine.
AB_LAYER_ARGS="--capacity 2048 --tokens 128,512 --phases dispatch,combine-bwd,combine-bwd-y" \
  timeout 130 bash tools/graph_ab.sh $OUT/ab-small .exp/base .exp/apart > $L/ab-small.log 2>&1
log "ab small rc=$?"; cp $OUT/ab-small/compare.md $OUT/compare-small.md
# 2. 2048 tokens: the unequal counts keep the sub-ranges' gain; every rank runs the plain copy on the branch.
AB_LAYER_ARGS="--tokens 2048 --counts 0/2048;2048/512;max --phases dispatch,combine-bwd,combine-bwd-y" \
  timeout 170 bash tools/graph_ab.sh $OUT/ab-2048 .exp/base .exp/apart > $L/ab-2048.log 2>&1
log "ab 2048 rc=$?"; cp $OUT/ab-2048/compare.md $OUT/compare-2048.md
# 3. The gradient tests on the branch (rank0_large runs the split copies, the other counts the plain ones).
GPU_TESTS="tests/python/gpu/test_autograd.py tests/python/gpu/test_fuzz.py" \
  timeout 90 bash .exp/apartt/tools/gpu_run.sh $OUT/grad tests > $L/grad-driver.log 2>&1
log "gradient tests rc=$?"; cp $OUT/grad/summary.txt $OUT/grad-summary.txt
cd $OUT && tar czf all.tar.gz logs ab-small ab-2048 grad && rm -rf logs ab-small ab-2048 grad
log done
