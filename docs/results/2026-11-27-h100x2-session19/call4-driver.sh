#!/usr/bin/env bash
# Session 19, call 4 (nvidia-h100-x2): the backward of combine's answers in units any block may take (two a token
# group, the second halves drawn by whichever block is free: uncommitted on ad7764a, this checkout) against
# ad7764a (.exp/rel) and against the same with four units a group (.exp/u4), the MoE layer's rounds alternated in
# one call, two rounds; then the whole GPU suite on the change (.exp/t, a copy of this checkout built with the test
# hooks).
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
for t in . .exp/rel .exp/u4; do
  (cd $t && env MOE_A2A_PROFILE=0 MAX_JOBS=8 timeout 240 python3 setup.py build_ext --inplace --force \
    > $OUT/build-$(basename $t).log 2>&1; echo "build $t rc=$?" >> $OUT/driver.log) &
done
(cd .exp/t && env MOE_A2A_PROFILE=0 MOE_A2A_TEST_HOOKS=1 MAX_JOBS=8 timeout 240 python3 setup.py build_ext --inplace --force \
  > $OUT/build-t.log 2>&1; echo "build t rc=$?" >> $OUT/driver.log) &
wait
log "built"
AB_BUILT=1 AB_ROUNDS=2 AB_BENCH=layer AB_LAYER_ARGS="--phases dispatch,combine-bwd,combine-bwd-y" \
  timeout 200 bash tools/graph_ab.sh $OUT/ab-layer .exp/rel . .exp/u4 > $OUT/ab-layer.log 2>&1
log "layer graph_ab rc=$?"
cp $OUT/ab-layer/compare.md $OUT/compare-layer.md
timeout 300 bash .exp/t/tools/gpu_run.sh $OUT/suite tests > $OUT/suite-driver.log 2>&1
log "suite rc=$?"
cp $OUT/suite/summary.txt $OUT/suite-summary.txt
cd $OUT && tar czf all.tar.gz ab-layer suite && rm -rf ab-layer suite
log done
