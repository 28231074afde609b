#!/usr/bin/env bash
# Session 30, call 4, nvidia-h100-x2, about 460 s with the start.
# Main with this session's two kernel changes (every spin's look an acquire load on NVIDIA; ranks by reservation where
# every block waits for the counts): 1. the whole GPU suite (hooks build), 2. README's tables in one run each:
# bench_graph at the ten README shapes with floors and eager times; DeepSeek-V3 128 tokens with issue 35's pairs; 4096
# tokens every rank, drawn and 64/4096, bf16 and fp8 e4m3fn; bench_moe_layer's training table. 3. with the time left,
# the reservation as committed (fp8 launches only; call 3 timed it in every launch of the large-batch instance)
# against a6d396a at 4096 tokens, bf16 and fp8, one round and the base again.
# Setup (here): for t in main mainh: mkdir -p .exp/$t && git archive dcdd34b | tar -x -C .exp/$t; a6d396a into
# .exp/base; rm -rf .exp/*/docs. carry [".exp/main", ".exp/mainh", ".exp/base"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/main .exp/mainh:hooks .exp/base >> $OUT/driver.log
log "built rc=$?"
bounded 270 bash -c "cd .exp/mainh && bash tools/gpu_run.sh $L/suite tests > $L/suite.log 2>&1"
log "suite rc=$?"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2> /dev/null
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
export BENCH_TREE=.exp/main BENCH_NPROC=2
bench graph 60 benchmarks/bench_graph.py --shapes "$S" --counts drawn
grep -A 14 -E "^ *shape " $L/graph.log > $OUT/graph-table.txt
bench layer 60 benchmarks/bench_moe_layer.py --tokens 128,512,2048
bench pairs 60 benchmarks/bench_graph.py --shapes 256,8,7168,128 --counts issue35
bench big 60 benchmarks/bench_graph.py --shapes 256,8,7168,4096 --counts "max;drawn;64/4096" --fp8 e4m3fn
grep -A 8 -E "^ *shape " $L/big.log > $OUT/big-table.txt
left=$((585 - (SECONDS - T0)))
[ $left -gt 60 ] && AB_BUILT=1 AB_GRAPH_ARGS="--shapes 256,8,7168,4096 --counts max;drawn --fp8 e4m3fn" \
  ab large $left .exp/base .exp/main
cd $OUT && tar czf all.tar.gz logs graph layer pairs big large 2> /dev/null; rm -rf logs graph layer pairs big large
log done
