#!/usr/bin/env bash
# Call 5 (session 11): the final tree with the profiler (.exp/prof, wip/final fc03cbc): an eager trace of fp8
# e4m3fn dispatch at DeepSeek-V3 4096 tokens (own rows placed by the quantizing senders), to set beside session 10's.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o5; rm -rf $O; mkdir -p $O/trace
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
(cd .exp/prof && timeout 240 env MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=0 MAX_JOBS=16 python3 setup.py build_ext --inplace --force > $O/prof_build.log 2>&1); log "prof build rc=$?"
(cd .exp/prof && PYTHONPATH=$PWD/python timeout 120 torchrun --master-port=29691 --nproc-per-node=2 benchmarks/bench_all2all.py \
  --shapes "256,8,7168,4096" --systems moe_a2a --layout packed --max-counts --no-graph --no-check --no-microbench \
  --no-floor --trace $O/trace/fp8 --trace-fp8 e4m3fn --out $O/trace/fp8-out > $O/trace/fp8.log 2>&1)
log "trace fp8 rc=$?"; pkill -f torchrun
gzip -q $O/trace/*.json
tar czf $OUT/o.tar.gz -C /tmp o5
log done
