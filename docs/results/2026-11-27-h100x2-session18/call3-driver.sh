#!/usr/bin/env bash
# Session 18, call 3 (nvidia-h100-x2): the whole GPU suite on the own rows taken as tasks (variant b of call 2,
# uncommitted on 4f7ddb9), and, built beside it, a profiler build of the same tree (.exp/prof) tracing the MoE
# layer's backward of combine at 512 and 2048 tokens with the JSON kept.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
(cd .exp/prof && timeout 240 env MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=0 MAX_JOBS=16 python3 setup.py build_ext \
  --inplace --force > $OUT/prof_build.log 2>&1; echo "prof build rc=$?" >> $OUT/driver.log) &
timeout 400 bash tools/gpu_run.sh $OUT/suite build,tests > $OUT/suite-driver.log 2>&1
log "suite rc=$?"
wait
O=$OUT/trace; mkdir -p $O
(cd .exp/prof && PYTHONPATH=$PWD/python timeout 150 torchrun --master-port=29671 --nproc-per-node=2 \
  benchmarks/bench_moe_layer.py --tokens 512,2048 --phases dispatch,combine-bwd,combine-bwd-y --iters 10 --no-floor \
  --no-check --out $O --trace $O/layer) > $OUT/layer.log 2>&1
log "layer trace rc=$?"; pkill -f torchrun
for f in $O/layer-*.json; do
  PYTHONPATH=.exp/prof/python python3 -m moe_a2a.trace summary $f > ${f%.json}-summary.txt 2>&1
  PYTHONPATH=.exp/prof/python python3 -m moe_a2a.trace chain $f > ${f%.json}-chain.txt 2>&1
done
gzip -q $O/*.json
cd $OUT && tar czf suite.tar.gz suite && rm -rf suite && tar czf trace.tar.gz trace && rm -rf trace
log done
