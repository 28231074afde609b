#!/usr/bin/env bash
# Session 21, call 6, nvidia-h100-x2: branch wip/cbwd-flagged-wgrads (the weight gradients of the backward of
# combine as flagged words, its end signals relaxed: no fence for the remote comb_w stores before them) against
# main, every rank at 128 / 512 / 2048 tokens; then the whole GPU suite on the branch.
# Setup (on the CPU machine, from this checkout):
#   for d in base fw fwt; do rm -rf .exp/$d; mkdir -p .exp/$d; done
#   git archive main | tar -x -C .exp/base; git archive wip/cbwd-flagged-wgrads | tar -x -C .exp/fw
#   git archive wip/cbwd-flagged-wgrads | tar -x -C .exp/fwt; rm -rf .exp/{base,fw,fwt}/docs
# carry [".exp/base", ".exp/fw", ".exp/fwt"].
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
L=$OUT/logs; mkdir -p $L
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/base .exp/fw .exp/fwt:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1 AB_ROUNDS=2 AB_BENCH=layer
AB_LAYER_ARGS="--tokens 128,512,2048 --phases dispatch,combine-bwd,combine-bwd-y" \
  timeout 120 bash tools/graph_ab.sh $OUT/ab .exp/base .exp/fw > $L/ab.log 2>&1
log "ab rc=$?"; cp $OUT/ab/compare.md $OUT/compare.md
timeout 290 bash .exp/fwt/tools/gpu_run.sh $OUT/suite tests > $L/suite-driver.log 2>&1
log "suite rc=$?"; cp $OUT/suite/summary.txt $OUT/suite-summary.txt
cd $OUT && tar czf all.tar.gz logs ab suite && rm -rf logs ab suite
log done
