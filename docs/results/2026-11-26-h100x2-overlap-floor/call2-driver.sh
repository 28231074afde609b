#!/usr/bin/env bash
# Call 2: can blocks set aside for sending let the link and the expansion overlap? bench_graph at DeepSeek-V3
# 256..4096 tokens for several (dispatch senders, groups per block); combine senders auto.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o2; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/driver.log
timeout 120 bash tools/gpu_run.sh $O/build build > $O/build.log 2>&1; log "build rc=$?"
p=29630
for cfg in auto:1 16,auto:4 16,auto:8 33,auto:2 33,auto:4 33,auto:8 66,auto:4 auto:4 24,auto:16; do
  s=${cfg%:*}; g=${cfg#*:}; n="s${s%%,*}-g$g"
  MOE_A2A_SEND_SMS=$s MOE_A2A_GROUPS_PER_BLOCK=$g timeout 60 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_graph.py \
    --shapes "256,8,7168,4096;256,8,7168,1024;256,8,7168,256" --counts "max;drawn" --no-microbench $([ $cfg = auto:1 ] || echo --no-floor) --out $O/$n > $O/$n.log 2>&1
  log "$n rc=$?"; p=$((p+1)); pkill -f torchrun
  [ $((SECONDS - T0)) -gt 520 ] && break
done
tar czf $OUT/o.tar.gz -C /tmp o2
log done
