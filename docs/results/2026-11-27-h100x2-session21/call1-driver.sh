#!/usr/bin/env bash
# Session 21, call 1 (written in session 20), nvidia-h100-x2: branch wip/cbwd-subranges8 (eight sub-ranges a
# group up to world 4; compile-checked only) against main, then its gradient tests. The model in protocol.md
# ("Sub-ranges") says 0/2048 should go from about 161 to about 140 us if the eight fences a group cost little.
# Setup (on the CPU machine, from this checkout on main):
#   for d in base s8 s8t; do rm -rf .exp/$d; mkdir -p .exp/$d; done
#   git archive main | tar -x -C .exp/base; git archive wip/cbwd-subranges8 | tar -x -C .exp/s8
#   git archive wip/cbwd-subranges8 | tar -x -C .exp/s8t; rm -rf .exp/{base,s8,s8t}/docs
# carry [".exp/base", ".exp/s8", ".exp/s8t"]. About 420 s of device time with the start; at world 4 (nvidia-h100-x4,
# the same trees) run step 1 with --counts "0/2048;max" and step 2 as it is.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
L=$OUT/logs; mkdir -p $L
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/base .exp/s8 .exp/s8t:hooks >> $OUT/driver.log
log "built rc=$?"
# 1. 2048 tokens (the sub-ranges' instance): the unequal counts where they apply and every rank where they do not.
export AB_BUILT=1 AB_ROUNDS=2 AB_BENCH=layer
AB_LAYER_ARGS="--tokens 2048 --counts 0/2048;2048/512;max --phases dispatch,combine-bwd,combine-bwd-y" \
  timeout 150 bash tools/graph_ab.sh $OUT/ab-s8 .exp/base .exp/s8 > $L/ab-s8.log 2>&1
log "ab rc=$?"; cp $OUT/ab-s8/compare.md $OUT/compare-s8.md
# 2. The gradient tests on the branch (test_autograd's rank0_large sends eight sub-ranges).
GPU_TESTS="tests/python/gpu/test_autograd.py tests/python/gpu/test_fuzz.py" \
  timeout 90 bash .exp/s8t/tools/gpu_run.sh $OUT/grad tests > $L/grad-driver.log 2>&1
log "gradient tests rc=$?"; cp $OUT/grad/summary.txt $OUT/grad-summary.txt
# 3. What an engine sized for 2048 tokens pays at 128 and 512 (main: the sub-ranges' instance runs there, where
#    nothing splits; session 20 measured +3-5 us at 128 with that code in the kernel): main built for each T against
#    main built for 2048 (bench_moe_layer --capacity), alternated twice.
for r in 1 2; do
  for cap in 0 2048; do
    (cd .exp/base && PYTHONPATH=$PWD/python timeout 100 torchrun --master-port=$((29700 + r * 10 + cap / 1024)) \
      --nproc-per-node=2 benchmarks/bench_moe_layer.py --tokens 128,512 --capacity $cap --iters 30 --no-floor \
      --no-check --phases dispatch,combine-bwd,combine-bwd-y --out $OUT/capacity/cap$cap-r$r) \
      > $L/capacity-cap$cap-r$r.log 2>&1
    log "capacity $cap round $r rc=$?"; pkill -f torchrun
  done
done
grep -H -E "^ +(128|512) " $L/capacity-*.log > $OUT/capacity-summary.txt
cd $OUT && tar czf all.tar.gz logs ab-s8 grad capacity && rm -rf logs ab-s8 grad capacity
log done
