#!/usr/bin/env bash
# Session 30, call 2, nvidia-h100-x2, about 500 s with the start.
# 1. acq (a6d396a: every spin's look an acquire load on NVIDIA) against main before it (9b5822d) at README's ten
#    shapes with counts drawn, two rounds; then DeepSeek-V3 4096 tokens, bf16 and fp8, every rank and drawn, one round.
# 2. Profiler build of a6d396a, one eager iteration traced at DeepSeek-V3 4096 tokens every rank, bf16 and fp8
#    e4m3fn: what the counting block and the late groups' numbering cost there now.
# Setup (here): mkdir -p .exp/{base,acq,prof}; git archive 9b5822d | tar -x -C .exp/base; git archive a6d396a into
# .exp/acq and .exp/prof; rm -rf .exp/*/docs. carry [".exp/base", ".exp/acq", ".exp/prof"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/base .exp/acq >> $OUT/driver.log &
bounded 220 bash -c "cd .exp/prof && MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=0 MAX_JOBS=5 python3 setup.py build_ext \
  --inplace --force > $L/build-profiler.log 2>&1; echo profiler build rc=\$? >> $OUT/driver.log" &
wait
log "built"
export AB_BUILT=1
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes $S --counts drawn" ab drawn 150 .exp/base .exp/acq
AB_GRAPH_ARGS="--shapes 256,8,7168,4096 --counts max;drawn --fp8 e4m3fn" ab large 200 .exp/base .exp/acq
for fp8 in "" e4m3fn; do
  n=T4096${fp8:+-$fp8}; mkdir -p $OUT/trace-$n; left=$((560 - (SECONDS - T0)))
  [ $left -gt 30 ] || break
  PYTHONPATH=$PWD/.exp/prof/python bounded $(( left < 70 ? left : 70 )) torchrun --nproc-per-node=2 \
    benchmarks/bench_all2all.py --shapes "256,8,7168,4096" --max-counts --no-graph --no-check ${fp8:+--trace-fp8 $fp8} \
    --systems moe_a2a --no-microbench --trace $OUT/trace-$n/trace > $L/trace-$n.log 2>&1
  log "trace $n rc=$?"
done
cd $OUT && tar czf all.tar.gz logs drawn large trace-* 2> /dev/null; rm -rf logs drawn large trace-*
log done
