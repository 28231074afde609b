#!/usr/bin/env bash
# Session 20, call 3 (nvidia-h100-x2): the branch with the sub-ranges' code in an instance of its own (.exp/new,
# .exp/newt with test hooks; the launcher picks it where EpConfig::grad_subranges_possible: the 2048-token engine,
# not the 128- and 512-token ones) against main (.exp/base): the layer's rounds alternated in one call, then the
# whole GPU suite on the branch.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
L=$OUT/logs; mkdir -p $L
for t in base new newt; do
  H=0; [ $t = newt ] && H=1
  (cd .exp/$t && env MOE_A2A_PROFILE=0 MOE_A2A_TEST_HOOKS=$H MAX_JOBS=10 timeout 240 python3 setup.py build_ext \
    --inplace --force > $L/build-$t.log 2>&1; echo "build $t rc=$?" >> $OUT/driver.log) &
done
wait
log built
export AB_BUILT=1 AB_ROUNDS=2 AB_BENCH=layer
AB_LAYER_ARGS="--tokens 2048 --counts max;0/2048;2048/512;drawn --phases dispatch,combine-bwd,combine-bwd-y" \
  timeout 200 bash tools/graph_ab.sh $OUT/ab-2048 .exp/base .exp/new > $L/ab-2048.log 2>&1
log "ab 2048 rc=$?"; cp $OUT/ab-2048/compare.md $OUT/compare-2048.md
AB_LAYER_ARGS="--tokens 128,512 --phases dispatch,combine-bwd,combine-bwd-y" \
  timeout 120 bash tools/graph_ab.sh $OUT/ab-small .exp/base .exp/new > $L/ab-small.log 2>&1
log "ab small rc=$?"; cp $OUT/ab-small/compare.md $OUT/compare-small.md
timeout 270 bash .exp/newt/tools/gpu_run.sh $OUT/suite tests > $L/suite-driver.log 2>&1
log "suite rc=$?"; cp $OUT/suite/summary.txt $OUT/suite-summary.txt
cd $OUT && tar czf all.tar.gz logs ab-2048 ab-small suite && rm -rf logs ab-2048 ab-small suite
log done
