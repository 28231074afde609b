#!/usr/bin/env bash
# Session 19, call 1 (nvidia-h100-x2): the whole GPU suite on HEAD (ad7764a: test_autograd's new grid of top-8 of 8
# experts a rank had not run on GPUs); built beside it a profiler build (.exp/prof) and a plain build without test
# hooks (.exp/rel) of the same tree. Then a trace of the MoE layer's rounds at 128 tokens (the backward of combine
# there is latency-bound), and the training rounds with unequal counts (never timed: every rank T so far).
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
for d in prof rel; do
  P=0; [ $d = prof ] && P=1
  (cd .exp/$d && timeout 300 env MOE_A2A_PROFILE=$P MOE_A2A_TEST_HOOKS=0 MAX_JOBS=8 python3 setup.py build_ext \
    --inplace --force > $OUT/${d}_build.log 2>&1; echo "$d build rc=$?" >> $OUT/driver.log) &
done
timeout 400 bash tools/gpu_run.sh $OUT/suite build,tests > $OUT/suite-driver.log 2>&1
log "suite rc=$?"
wait
O=$OUT/trace; mkdir -p $O
(cd .exp/prof && PYTHONPATH=$PWD/python timeout 100 torchrun --master-port=29671 --nproc-per-node=2 \
  benchmarks/bench_moe_layer.py --tokens 128 --phases dispatch,combine-bwd,combine-bwd-y --iters 10 --no-floor \
  --no-check --out $O --trace $O/layer) > $OUT/layer-trace.log 2>&1
log "layer trace rc=$?"; pkill -f torchrun
for f in $O/layer-*.json; do
  PYTHONPATH=.exp/prof/python python3 -m moe_a2a.trace summary $f > ${f%.json}-summary.txt 2>&1
  PYTHONPATH=.exp/prof/python python3 -m moe_a2a.trace chain $f > ${f%.json}-chain.txt 2>&1
done
gzip -q $O/*.json
U=$OUT/unequal; mkdir -p $U
for spec in "128|max;drawn;0/128;128/32" "2048|max;drawn;0/2048;2048/512"; do
  T=${spec%%|*}; C=${spec#*|}
  (cd .exp/rel && PYTHONPATH=$PWD/python timeout 150 torchrun --master-port=29672 --nproc-per-node=2 \
    benchmarks/bench_moe_layer.py --tokens $T --counts "$C" \
    --phases dispatch,combine,dispatch-bwd,combine-bwd,combine-bwd-y --iters 30 --no-check --out $U/T$T) \
    > $U/T$T.log 2>&1
  log "unequal T=$T rc=$?"; pkill -f torchrun
done
cd $OUT && tar czf suite.tar.gz suite && rm -rf suite && tar czf trace.tar.gz trace && rm -rf trace
log done
