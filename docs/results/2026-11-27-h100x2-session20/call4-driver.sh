#!/usr/bin/env bash
# Session 20, call 4 (nvidia-h100-x4): the same trees as call 3 at world 4: the layer's rounds at 2048 tokens, every
# rank and 0/2048 (ranks 0 and 2 with none, 1 and 3 with 2048: each large rank sends sub-ranges to two peers),
# alternated with main in one call; then test_autograd.py at world 4 on the branch (rank0_large: rank 0 sends its
# sub-ranges to three peers).
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
L=$OUT/logs; mkdir -p $L
for t in base new newt; do
  H=0; [ $t = newt ] && H=1
  (cd .exp/$t && env MOE_A2A_PROFILE=0 MOE_A2A_TEST_HOOKS=$H MAX_JOBS=20 timeout 240 python3 setup.py build_ext \
    --inplace --force > $L/build-$t.log 2>&1; echo "build $t rc=$?" >> $OUT/driver.log) &
done
wait
log built
export AB_BUILT=1 AB_ROUNDS=2 AB_BENCH=layer
AB_LAYER_ARGS="--tokens 2048 --counts max;0/2048 --phases dispatch,combine-bwd,combine-bwd-y" \
  timeout 240 bash tools/graph_ab.sh $OUT/ab-w4 .exp/base .exp/new > $L/ab-w4.log 2>&1
log "ab world 4 rc=$?"; cp $OUT/ab-w4/compare.md $OUT/compare-w4.md
GPU_TESTS="tests/python/gpu/test_autograd.py" timeout 180 bash .exp/newt/tools/gpu_run.sh $OUT/grad tests \
  > $L/grad-driver.log 2>&1
log "gradient tests rc=$?"; cp $OUT/grad/summary.txt $OUT/grad-summary.txt
cd $OUT && tar czf all.tar.gz logs ab-w4 grad && rm -rf logs ab-w4 grad
log done
