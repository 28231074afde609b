#!/usr/bin/env bash
# Session 40, call 4 (nvidia-h200-x2): main 30df1b9 as it is. 1. The backward of combine at 256 and 512 tokens every
# rank traced (profiler build), with and without the router's gradient, next to the dispatch: where the 12-15 us of
# the read of y go (session 33 traced 128 and 2048 only). 2. The whole GPU suite on a hooks build of main.
# carry [".exp/prof", ".exp/mainh"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/prof:profiler .exp/mainh:hooks >> $OUT/driver.log
log "built rc=$?"
mkdir -p $OUT/trace
BENCH_TREE=.exp/prof bench layer-traced 120 benchmarks/bench_moe_layer.py --tokens 256,512 --no-floor --no-check \
  --phases dispatch,combine-bwd,combine-bwd-y --trace $OUT/trace/layer
for f in $OUT/trace/*.json; do
  PYTHONPATH=.exp/prof/python python3 -m moe_a2a.trace chain "$f" > "${f%.json}-chain.txt" 2>&1
  PYTHONPATH=.exp/prof/python python3 -m moe_a2a.trace summary "$f" > "${f%.json}-summary.txt" 2>&1
done
cat $OUT/trace/*-chain.txt > $OUT/chains.txt 2> /dev/null
left=$((560 - (SECONDS - T0)))
bounded $left bash -c "cd .exp/mainh && bash tools/gpu_run.sh $L/suite tests > $L/suite.log 2>&1"
log "suite rc=$?"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs layer-traced trace 2> /dev/null; rm -rf logs layer-traced trace
log done
