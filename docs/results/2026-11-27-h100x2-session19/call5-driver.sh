#!/usr/bin/env bash
# Session 19, call 5 (nvidia-h100-x2): benchmarks/bench_hf_model.py on 2 x H100 (its numbers so far were 2 x H200
# only), and the training rounds with unequal counts at 2048 tokens (call 1's log of them did not come back), both
# on ad7764a built without test hooks (.exp/rel).
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
(cd .exp/rel && env MOE_A2A_PROFILE=0 MOE_A2A_TEST_HOOKS=0 MAX_JOBS=32 timeout 240 python3 setup.py build_ext --inplace \
  --force > $OUT/build.log 2>&1); log "build rc=$?"
mkdir -p $OUT/res
(cd .exp/rel && PYTHONPATH=$PWD/python timeout 60 torchrun --master-port=29672 --nproc-per-node=2 \
  benchmarks/bench_moe_layer.py --tokens 2048 --counts "max;drawn;0/2048;2048/512" \
  --phases dispatch,combine,dispatch-bwd,combine-bwd,combine-bwd-y --iters 30 --no-check --out $OUT/res/T2048) \
  > $OUT/res/unequal-T2048.log 2>&1
log "unequal T=2048 rc=$?"; pkill -f torchrun
(cd .exp/rel && PYTHONPATH=$PWD/python timeout 330 torchrun --master-port=29673 --nproc-per-node=2 \
  benchmarks/bench_hf_model.py --out $OUT/res/hf) > $OUT/res/bench_hf_model.log 2>&1
log "hf rc=$?"; pkill -f torchrun
cd $OUT && tar czf res.tar.gz res && rm -rf res
log done
