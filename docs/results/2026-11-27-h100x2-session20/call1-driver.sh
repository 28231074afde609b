#!/usr/bin/env bash
# Session 20, call 1, nvidia-h100-x2: branch wip/cbwd-subranges (the backward of
# combine's output gradients in sub-ranges toward a peer with at most half the tokens; compile-checked only) against
# main, then its tests.
# Setup (on the CPU machine, from this checkout on main):
#   for d in base sub subt; do rm -rf .exp/$d; mkdir -p .exp/$d; done
#   git archive main | tar -x -C .exp/base; git archive wip/cbwd-subranges | tar -x -C .exp/sub
#   git archive wip/cbwd-subranges | tar -x -C .exp/subt; rm -rf .exp/{base,sub,subt}/docs
# carry [".exp/base", ".exp/sub", ".exp/subt"]. About 420 s of device time with the start.
# 1. The layer's rounds alternated in one call (two rounds), DeepSeek-V3: 2048 tokens at counts max, 0/2048,
#    2048/512 and drawn (the sub-ranges apply to the unequal ones), and 128 / 512 every rank (must not move:
#    nothing but where the signal lives changes there; the kernel is over its code-size budget).
# 2. The gradient tests on the branch (test_autograd.py gained rank0_large: rank 0 with 4x the others' tokens,
#    2 blocks, so sub-ranges), then the rest of the suite if time is left (the whole suite is ~180 s).
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
L=$OUT/logs; mkdir -p $L  # the device returns few files a call: everything but driver.log and the tables goes in one archive
for t in base sub; do
  (cd .exp/$t && env MOE_A2A_PROFILE=0 MOE_A2A_TEST_HOOKS=0 MAX_JOBS=10 timeout 240 python3 setup.py build_ext \
    --inplace --force > $L/build-$t.log 2>&1; echo "build $t rc=$?" >> $OUT/driver.log) &
done
(cd .exp/subt && env MOE_A2A_PROFILE=0 MOE_A2A_TEST_HOOKS=1 MAX_JOBS=10 timeout 240 python3 setup.py build_ext \
  --inplace --force > $L/build-subt.log 2>&1; echo "build subt rc=$?" >> $OUT/driver.log) &
wait
log built
export AB_BUILT=1 AB_ROUNDS=2 AB_BENCH=layer
AB_LAYER_ARGS="--tokens 2048 --counts max;0/2048;2048/512;drawn --phases dispatch,combine-bwd,combine-bwd-y" \
  timeout 200 bash tools/graph_ab.sh $OUT/ab-2048 .exp/base .exp/sub > $L/ab-2048.log 2>&1
log "ab 2048 rc=$?"; cp $OUT/ab-2048/compare.md $OUT/compare-2048.md
AB_LAYER_ARGS="--tokens 128,512 --phases dispatch,combine-bwd,combine-bwd-y" \
  timeout 120 bash tools/graph_ab.sh $OUT/ab-small .exp/base .exp/sub > $L/ab-small.log 2>&1
log "ab small rc=$?"; cp $OUT/ab-small/compare.md $OUT/compare-small.md
GPU_TESTS="tests/python/gpu/test_autograd.py tests/python/gpu/test_moe_layer.py tests/python/gpu/test_fuzz.py" \
  timeout 150 bash .exp/subt/tools/gpu_run.sh $OUT/grad tests > $L/grad-driver.log 2>&1
log "gradient tests rc=$?"; cp $OUT/grad/summary.txt $OUT/grad-summary.txt
cd $OUT && tar czf all.tar.gz logs ab-2048 ab-small grad && rm -rf logs ab-2048 ab-small grad
log done
