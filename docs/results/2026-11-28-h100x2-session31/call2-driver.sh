#!/usr/bin/env bash
# Session 31, call 2, nvidia-h100-x2, about 420 s with the start.
# fp8 at large batches after the reservation (dcdd34b): every block sends its one group, then copies its items
# (session 30 call 2's blocks: sends 16-113 us, copies 123-193), so the link and the copies take turns. Does a
# second or fourth group a block (MOE_A2A_GROUPS_PER_BLOCK, tried before own_placed and the reservation: slower)
# interleave them now? Main (67c141e) graph + eager at DeepSeek-V3 1024 and 4096 tokens, bf16 and fp8 e4m3fn,
# every rank and drawn, groups_per_block 1, 2, 4, 1 again; then one eager fp8 iteration at 4096 traced with 1 and 2.
# Setup (here): mkdir -p .exp/{base,prof}; git archive 67c141e into both; rm -rf .exp/*/docs.
# carry [".exp/base", ".exp/prof"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/base .exp/prof:profiler >> $OUT/driver.log
log "built rc=$?"
export BENCH_TREE=.exp/base
for g in 1 2 4 1b; do
  MOE_A2A_GROUPS_PER_BLOCK=${g%b} bench gpb$g 100 benchmarks/bench_graph.py --shapes "256,8,7168,4096;256,8,7168,1024" \
    --counts "max;drawn" --fp8 e4m3fn --no-microbench --no-floor
done
for g in 1 2; do
  n=T4096-e4m3fn-gpb$g; mkdir -p $OUT/trace-$n; left=$((560 - (SECONDS - T0)))
  [ $left -gt 30 ] || break
  MOE_A2A_GROUPS_PER_BLOCK=$g PYTHONPATH=$PWD/.exp/prof/python bounded $(( left < 70 ? left : 70 )) torchrun \
    --nproc-per-node=2 benchmarks/bench_all2all.py --shapes "256,8,7168,4096" --max-counts --no-graph --no-check \
    --trace-fp8 e4m3fn --systems moe_a2a --no-microbench --trace $OUT/trace-$n/trace > $L/trace-$n.log 2>&1
  log "trace $n rc=$?"
done
cd $OUT && tar cJf all.tar.xz logs gpb* trace-* 2> /dev/null; rm -rf logs gpb* trace-*
log done
