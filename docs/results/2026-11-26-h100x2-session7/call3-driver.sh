#!/usr/bin/env bash
# Call 3 (session 7): the final candidate (the working tree, c6ff3f7: own rows direct from 1024 tokens,
# combine's own rows only when no peer has fewer than 3/4 of this rank's tokens, combine's weights loaded
# once a row) against main (4c26a1a, .exp/main) and the candidate with combine's own rows unconditional
# (4f50bc6, .exp/c1), all built here. The whole GPU suite on the candidate; then bench_graph with the
# in-run floor on the candidate (issue 35's rows: DeepSeek-V3 1 / 128 / 256 / 1024 / 4096 tokens, the
# challenge shapes with counts drawn, fp8, the unequal pairs) next to main (no floor), and combine split
# in halves on the candidate.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o3; mkdir -p $O/bench
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
(timeout 200 bash tools/gpu_run.sh $O/cand_build build > $O/cand_build_driver.log 2>&1; echo "cand build rc=$?" >> $O/cand_build_driver.log) &
(cd .exp/main && timeout 200 bash tools/gpu_run.sh $O/main_build build > $O/main_build_driver.log 2>&1; echo "main build rc=$?" >> $O/main_build_driver.log) &
(cd .exp/c1 && timeout 200 bash tools/gpu_run.sh $O/c1_build build > $O/c1_build_driver.log 2>&1; echo "c1 build rc=$?" >> $O/c1_build_driver.log) &
wait; log "$(tail -1 $O/cand_build_driver.log) / $(tail -1 $O/main_build_driver.log) / $(tail -1 $O/c1_build_driver.log)"
timeout 280 setsid bash tools/gpu_run.sh $O/suite tests --durations=20 > $O/suite_driver.log 2>&1; log "suite rc=$?"
pkill -f torchrun; pkill -f pytest
cp $O/suite/summary.txt $OUT/suite_summary.txt 2>/dev/null
p=29641
bench() {  # tree name send_sms shapes counts [extra]
  local t=$1 n=$2 s=$3 shapes=$4 counts=$5; shift 5
  [ $((SECONDS - T0)) -gt 545 ] && { log "$n skipped (time)"; return; }
  (cd $t && PYTHONPATH=$PWD/python MOE_A2A_SEND_SMS=$s timeout 45 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_graph.py \
    --shapes "$shapes" --counts "$counts" --no-microbench "$@" --out $O/bench/$n > $O/bench/$n.log 2>&1)
  log "$n rc=$?"; p=$((p+1)); pkill -f torchrun
}
L="256,8,7168,4096;256,8,7168,1024;256,8,7168,256"
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256"
bench . cand-equal auto "$L" max
bench .exp/main main-equal auto "$L" max --no-floor
bench . cand-drawn4096 auto "256,8,7168,4096" drawn
bench .exp/main main-drawn4096 auto "256,8,7168,4096" drawn --no-floor
bench .exp/c1 c1-drawn4096 auto "256,8,7168,4096" drawn --no-floor
bench . cand-small auto "$S" drawn
bench .exp/main main-small auto "$S" drawn --no-floor
bench . cand-one auto "256,8,7168,1;256,8,7168,128" max
bench .exp/main main-one auto "256,8,7168,1;256,8,7168,128" max --no-floor
bench . cand-fp8 auto "256,8,7168,128;256,8,7168,4096" max --fp8 e4m3fn --no-floor
bench . cand-unequal auto "64,6,2048,32;8,2,6144,16;256,8,7168,128" issue35 --no-floor
bench . cand-64-4096 auto "256,8,7168,4096" "64/4096;4096/64" --no-floor
bench . cand-c66 auto,66 "256,8,7168,4096;256,8,7168,1024" max --no-floor
tar czf $OUT/o.tar.gz -C /tmp o3
log done
