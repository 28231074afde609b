#!/usr/bin/env bash
# Session 20, call 5 (nvidia-h100-x2): sub-ranges that halve from the end (n/8, n/8, n/4, n/2 of a group's n tokens:
# .exp/geo, .exp/geot with test hooks; only EpConfig::grad_subrange changes) against the equal quarters on main
# (.exp/new, the tree of call 3). At 0/2048 the idle rank's answers are HBM-bound from the first sub-range's arrival
# (36 us, call 2) to the end, so a smaller first sub-range should end them earlier. Then the gradient tests on it.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
L=$OUT/logs; mkdir -p $L
for t in new geo geot; do
  H=0; [ $t = geot ] && H=1
  (cd .exp/$t && env MOE_A2A_PROFILE=0 MOE_A2A_TEST_HOOKS=$H MAX_JOBS=10 timeout 200 python3 setup.py build_ext \
    --inplace --force > $L/build-$t.log 2>&1; echo "build $t rc=$?" >> $OUT/driver.log) &
done
wait
log built
export AB_BUILT=1 AB_ROUNDS=2 AB_BENCH=layer
AB_LAYER_ARGS="--tokens 2048 --counts 0/2048;2048/512;max --phases dispatch,combine-bwd,combine-bwd-y" \
  timeout 150 bash tools/graph_ab.sh $OUT/ab-geo .exp/new .exp/geo > $L/ab-geo.log 2>&1
log "ab rc=$?"; cp $OUT/ab-geo/compare.md $OUT/compare-geo.md
GPU_TESTS="tests/python/gpu/test_autograd.py tests/python/gpu/test_fuzz.py" \
  timeout 90 bash .exp/geot/tools/gpu_run.sh $OUT/grad tests > $L/grad-driver.log 2>&1
log "gradient tests rc=$?"; cp $OUT/grad/summary.txt $OUT/grad-summary.txt
cd $OUT && tar czf all.tar.gz logs ab-geo grad && rm -rf logs ab-geo grad
log done
