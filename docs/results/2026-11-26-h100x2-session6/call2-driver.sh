#!/usr/bin/env bash
# Call 2 (session 6): where dispatch's time goes at DeepSeek-V3 T=4096, main (with the arrival-driven backward),
# the profiler built in: traces with every block sending and receiving (auto), with 33 and 66 sending blocks.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o2; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/driver.log
MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=1 MAX_JOBS=16 timeout 200 python3 setup.py build_ext --inplace --force > $O/build.log 2>&1; log "build rc=$?"
p=29651
run_cfg() {  # name, env...
  local n=$1; shift
  env "$@" timeout 100 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_all2all.py --shapes 256,8,7168,4096 \
    --systems moe_a2a --no-microbench --trace $O/trace-$n.json --out $O/bench-$n > $O/bench-$n.log 2>&1; log "bench $n rc=$?"; p=$((p+1))
  pkill -f torchrun
  for t in $O/trace-$n-*.json; do
    [ -f "$t" ] || continue
    { python3 -m moe_a2a.trace summary $t; python3 -m moe_a2a.trace chain $t; python3 -m moe_a2a.trace timeline $t --waves;
      python3 -m moe_a2a.trace timeline $t --block 100 --waves; } > ${t%.json}.txt 2>&1
    gzip $t
  done
}
run_cfg auto MOE_A2A_SEND_SMS=auto
run_cfg s33g2 MOE_A2A_SEND_SMS=33,auto MOE_A2A_GROUPS_PER_BLOCK=2
run_cfg s66g4 MOE_A2A_SEND_SMS=66,auto MOE_A2A_GROUPS_PER_BLOCK=4
run_cfg s16g4 MOE_A2A_SEND_SMS=16,auto MOE_A2A_GROUPS_PER_BLOCK=4
tar czf $OUT/o.tar.gz -C /tmp o2
log done
