#!/usr/bin/env bash
# Session 33, call 1: nvidia-h100-x2, about 520 s with the start. Written in session 32 as next-driver-1.sh.
# Session 32 landed the turns (receives_first) with a kOwnRows gate after its last GPU call (d88eff2): run its suite.
# Then README's 4096-token rows again (the table is session 30's; turns and doubled groups since), with the same
# run's floor, and one eager bf16 iteration at 4096 tokens every rank traced, to see where combine's 281 us go
# against its ~150 us of link and HBM (session 32: turns took it from 299 to 281).
# Setup (here): mkdir -p .exp/{main,mainh,prof}; git archive HEAD into each; rm -rf .exp/*/docs.
# carry [".exp/main", ".exp/mainh", ".exp/prof"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/main .exp/mainh:hooks .exp/prof:profiler >> $OUT/driver.log
log "built rc=$?"
BENCH_TREE=.exp/main bench big 90 benchmarks/bench_graph.py --shapes 256,8,7168,4096 --counts "max;drawn;64/4096" --fp8 e4m3fn
n=T4096-bf16; mkdir -p $OUT/trace-$n
PYTHONPATH=$PWD/.exp/prof/python bounded 70 torchrun --nproc-per-node=2 benchmarks/bench_all2all.py \
  --shapes "256,8,7168,4096" --max-counts --no-graph --no-check --systems moe_a2a --no-microbench \
  --trace $OUT/trace-$n/trace > $L/trace-$n.log 2>&1
log "trace $n rc=$?"
left=$((590 - (SECONDS - T0)))
bounded $left bash -c "cd .exp/mainh && bash tools/gpu_run.sh $L/suite tests > $L/suite.log 2>&1"
log "suite rc=$?"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs big trace-* 2> /dev/null; rm -rf logs big trace-*
log done
