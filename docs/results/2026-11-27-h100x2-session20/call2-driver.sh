#!/usr/bin/env bash
# Session 20, call 2 (nvidia-h100-x2): profiler traces of main (.exp/pbase) and wip/cbwd-subranges (.exp/psub), both
# built with MOE_A2A_PROFILE=1: at 128 tokens every rank (the branch took combine-bwd 33.1 -> 36.0 us and
# combine-bwd-y 24.9 -> 30.0 in call 1, where no sub-range applies: which stage grew?) and at 2048 tokens 0/2048
# (the branch took 207.7 -> 162.3 us, 125-130 expected: where does the rest go?).
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
for d in pbase psub; do
  (cd .exp/$d && timeout 300 env MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=0 MAX_JOBS=16 python3 setup.py build_ext \
    --inplace --force > $OUT/${d}_build.log 2>&1; echo "$d build rc=$?" >> $OUT/driver.log) &
done
wait
log built
O=$OUT/trace; mkdir -p $O
port=29671
for d in pbase psub; do
  for spec in "128|max" "2048|0/2048"; do
    T=${spec%%|*}; C=${spec#*|}; port=$((port + 1))
    (cd .exp/$d && PYTHONPATH=$PWD/python timeout 100 torchrun --master-port=$port --nproc-per-node=2 \
      benchmarks/bench_moe_layer.py --tokens $T --counts "$C" --phases dispatch,combine-bwd,combine-bwd-y --iters 20 \
      --no-floor --no-check --out $O/$d-T$T --trace $O/$d) > $O/$d-T$T.log 2>&1
    log "$d T=$T rc=$?"; pkill -f torchrun
  done
done
for f in $O/*.json; do
  case $f in *bench_moe_layer*) continue;; esac
  PYTHONPATH=.exp/pbase/python python3 -m moe_a2a.trace summary $f > ${f%.json}-summary.txt 2>&1
  PYTHONPATH=.exp/pbase/python python3 -m moe_a2a.trace chain $f > ${f%.json}-chain.txt 2>&1
done
gzip -q $O/*.json
cd $OUT && tar czf trace.tar.gz trace && rm -rf trace
log done
