#!/usr/bin/env bash
# Session 16, call 4 (nvidia-h100-x2): where the backward of combine spends its time on the final tree (wave sums,
# a81975c): a profiler build (MOE_A2A_PROFILE=1, no test hooks), bench_moe_layer --trace at 512 and 2048 tokens
# (DeepSeek-V3, every rank T), then each trace's summary and chain.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
O=$OUT/trace; mkdir -p $O
timeout 240 env MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=0 MAX_JOBS=30 python3 setup.py build_ext --inplace --force \
  > $OUT/prof_build.log 2>&1
log "prof build rc=$?"
timeout 200 torchrun --master-port=29671 --nproc-per-node=2 benchmarks/bench_moe_layer.py --tokens 512,2048 \
  --phases dispatch,combine-bwd,combine-bwd-y --iters 10 --no-floor --no-check --out $O --trace $O/layer \
  > $OUT/layer.log 2>&1
log "layer trace rc=$?"; pkill -f torchrun
for f in $O/layer-*.json; do
  python3 -m moe_a2a.trace summary $f > ${f%.json}-summary.txt 2>&1
  python3 -m moe_a2a.trace chain $f > ${f%.json}-chain.txt 2>&1
done
gzip -q $O/*.json
tar czf $OUT/o.tar.gz -C $OUT trace layer.log prof_build.log
log done
