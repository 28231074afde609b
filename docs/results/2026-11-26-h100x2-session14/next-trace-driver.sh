#!/usr/bin/env bash
# NOT RUN (session 14 had no device time left; the device tool refused the call). For the next session, 2 x H100:
# main and call 1's counts as words (.exp/pr1: `git archive HEAD | tar -x -C .exp/pr1 && (cd .exp/pr1 && patch -p1 <
# ../../docs/results/2026-11-26-h100x2-session14/call1-counts-as-words.patch)`), each built with the in-kernel
# profiler and traced at DeepSeek-V3 one token a rank, 8 graph iterations: where the 0.7 us that counts as words
# lose there goes (eager dispatch was faster with them). Then, locally:
#   python -m moe_a2a.trace chain trace-main/*.json.gz   (and trace-pr1)
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
pbuild() { (cd $1 && timeout 150 env MOE_A2A_PROFILE=1 MAX_JOBS=16 python3 setup.py build_ext --inplace --force > $OUT/$2_build.log 2>&1; echo "$2 build rc=$?" >> $OUT/$2_build.log); }
pbuild . main & pbuild .exp/pr1 pr1 &
wait; for n in main pr1; do log "$(tail -1 $OUT/${n}_build.log)"; done
p=29681
for t in "main ." "pr1 .exp/pr1"; do
  set -- $t
  (cd $2 && PYTHONPATH=$PWD/python timeout 40 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_all2all.py \
    --shapes "256,8,7168,1" --systems moe_a2a --layout packed --no-graph --no-check --no-microbench --no-floor \
    --trace-graph 8 --trace $OUT/trace-$1 > $OUT/trace-$1.log 2>&1); log "trace $1 rc=$?"; p=$((p+1)); pkill -f torchrun
done
log done
