#!/usr/bin/env bash
# Session 19, call 6 (nvidia-h100-x2): where the backward of combine's time goes with unequal counts (call 5: 1.63 /
# 1.67x the dispatch at 2048/512 and 0/2048 tokens, 1.37x at 2048 every rank): a profiler build of ad7764a
# (.exp/prof) traces dispatch and the backward of combine at 2048 tokens, counts 0/2048 and 2048/512; and the
# training rounds with unequal counts at 512 tokens, eager, on a plain build (.exp/rel).
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
for d in prof rel; do
  P=0; [ $d = prof ] && P=1
  (cd .exp/$d && timeout 240 env MOE_A2A_PROFILE=$P MOE_A2A_TEST_HOOKS=0 MAX_JOBS=16 python3 setup.py build_ext \
    --inplace --force > $OUT/${d}_build.log 2>&1; echo "$d build rc=$?" >> $OUT/driver.log) &
done
wait
log built
mkdir -p $OUT/res/trace
(cd .exp/prof && PYTHONPATH=$PWD/python timeout 100 torchrun --master-port=29671 --nproc-per-node=2 \
  benchmarks/bench_moe_layer.py --tokens 2048 --counts "0/2048;2048/512" --phases dispatch,combine-bwd --iters 10 \
  --no-floor --no-check --out $OUT/res/trace --trace $OUT/res/trace/layer) > $OUT/res/layer-trace.log 2>&1
log "layer trace rc=$?"; pkill -f torchrun
for f in $OUT/res/trace/layer-*.json; do
  PYTHONPATH=.exp/prof/python python3 -m moe_a2a.trace chain $f > ${f%.json}-chain.txt 2>&1
done
gzip -q $OUT/res/trace/*.json
(cd .exp/rel && PYTHONPATH=$PWD/python timeout 80 torchrun --master-port=29672 --nproc-per-node=2 \
  benchmarks/bench_moe_layer.py --tokens 512 --counts "max;drawn;0/512;512/128" \
  --phases dispatch,combine,dispatch-bwd,combine-bwd,combine-bwd-y --iters 30 --no-check --out $OUT/res/T512) \
  > $OUT/res/unequal-T512.log 2>&1
log "unequal T=512 rc=$?"; pkill -f torchrun
cd $OUT && tar czf res.tar.gz res && rm -rf res
log done
