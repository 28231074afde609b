#!/usr/bin/env bash
# Call 4 (session 6): the whole GPU suite twice in a row on the final tree (with call 1's run on the same library
# and test code: three in a row); then, if time is left, an in-kernel profiler trace of dispatch + combine at
# DeepSeek-V3 T=4096 with every rank at 4096 tokens (a copy of the tree built with MOE_A2A_PROFILE=1 in .exp/prof).
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o4; mkdir -p $O/trace
nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/driver.log
(cd .exp/prof && MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=1 MAX_JOBS=16 timeout 200 python3 setup.py build_ext --inplace --force > $O/prof_build.log 2>&1; echo "prof build rc=$?" >> $O/prof_build.log) &
timeout 200 bash tools/gpu_run.sh $O/build build > $O/build_driver.log 2>&1; log "build rc=$?"
wait; log "$(tail -1 $O/prof_build.log)"
GPU_TEST_RUNS=2 timeout 480 setsid bash tools/gpu_run.sh $O/suite tests > $O/suite_driver.log 2>&1; log "suites rc=$?"
pkill -f torchrun; pkill -f pytest
cp $O/suite/summary.txt $OUT/suite_summary.txt 2>/dev/null
left=$((585 - (SECONDS - T0)))
if [ $left -gt 40 ]; then
  (cd .exp/prof && PYTHONPATH=$PWD/python timeout $left torchrun --master-port=29681 --nproc-per-node=2 benchmarks/bench_all2all.py \
    --shapes 256,8,7168,4096 --systems moe_a2a --no-microbench --no-floor --no-graph --max-counts --trace $O/trace/trace.json \
    --out $O/trace/bench > $O/trace/bench.log 2>&1); log "trace rc=$?"
  pkill -f torchrun
  for t in $O/trace/trace-*.json; do
    [ -f "$t" ] || continue
    (cd .exp/prof && export PYTHONPATH=$PWD/python && { python3 -m moe_a2a.trace summary $t; python3 -m moe_a2a.trace chain $t;
      python3 -m moe_a2a.trace timeline $t --waves; } > ${t%.json}.txt 2>&1)
    gzip $t
  done
fi
tar czf $OUT/o.tar.gz -C /tmp o4
log done
