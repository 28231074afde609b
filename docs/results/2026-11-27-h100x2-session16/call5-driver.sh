#!/usr/bin/env bash
# Session 16, call 5 (nvidia-h100-x4): the MoE layer's all-to-all rounds at world 4 on the final tree (a81975c's
# kernels), with hbm-y and the floor: DeepSeek-V3, every rank T = 128 / 512 / 2048.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
timeout 200 env MOE_A2A_TEST_HOOKS=0 MAX_JOBS=60 python3 setup.py build_ext --inplace --force > $OUT/build.log 2>&1
log "build rc=$?"
timeout 150 torchrun --master-port=29681 --nproc-per-node=4 benchmarks/bench_moe_layer.py --tokens 128,512,2048 \
  --iters 30 --phases dispatch,combine,dispatch-bwd,combine-bwd,combine-bwd-y,hbm-y --no-check --out $OUT/layer \
  > $OUT/layer.log 2>&1
log "layer rc=$?"
