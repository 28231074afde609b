#!/usr/bin/env bash
# Call 4 of session 36: nvidia-h200-x2. .exp/new = 9356cf3 (the SwiGLU fused into grouped_gemv). profile_decode.py on
# it (the decode step per kernel after the fusion, as call 2 before it), then bench_hf_model.py with unequal batches
# per rank (--batches 1:8,8:64,1:64, as call 1 on 7eaa8b7). carry [".exp/new"].
source tools/device_call.sh
R=docs/results/2026-11-28-h200x2-session36
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/new >> $OUT/driver.log
log "built rc=$?"
PYTHONPATH=$PWD/.exp/new/python:$PWD/.exp/new/benchmarks bounded 120 torchrun --nproc-per-node=2 \
  $R/profile_decode.py $OUT/profile 1 8 > $L/profile.log 2>&1
log "profile rc=$?"
cp $OUT/profile/summary-rank0.txt $OUT/profile-summary.txt 2> /dev/null
rm -f $OUT/profile/trace-*.json  # call 2 kept the traces before the fusion; the kernel tables say the rest
BENCH_TREE=.exp/new bench hf-unequal 120 benchmarks/bench_hf_model.py --batches 1:8,8:64,1:64
{ echo "== hf-unequal"; grep -B1 -A4 "^B/rank  prefill vs" $L/hf-unequal.log; grep -A11 "^B/rank  *system" $L/hf-unequal.log | head -12; } > $OUT/hf-summary.txt
cd $OUT && tar cJf all.tar.xz logs profile hf-unequal 2> /dev/null; rm -rf logs profile hf-unequal
log done
