#!/usr/bin/env bash
# Session 23, call 4, nvidia-h100-x2: main (25b8df6) as it stands, for README's tables in one run each: bench_graph at
# README's forward shapes (the challenge shapes and DeepSeek-V3 at 1..128 tokens, counts drawn: at T=1 every rank
# holds 1), with the floor and eager times; bench_moe_layer at 128 / 512 / 2048 tokens every rank (every phase, the
# training table), then with counts drawn and 0/128. Nothing to carry: it builds main in place.
source tools/device_call.sh
BUILD_TIMEOUT=250 bash tools/build_trees.sh $L . >> $OUT/driver.log
log "built rc=$?"
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
PYTHONPATH=$PWD/python timeout 180 torchrun --nproc-per-node=2 benchmarks/bench_graph.py --shapes "$S" --counts drawn \
  --out $OUT/graph > $L/graph.log 2>&1
log "graph rc=$?"; grep -A 14 -E "^ *shape " $L/graph.log > $OUT/graph-table.txt
PYTHONPATH=$PWD/python timeout 150 torchrun --nproc-per-node=2 benchmarks/bench_moe_layer.py --tokens 128,512,2048 \
  --out $OUT/layer > $L/layer.log 2>&1
log "layer rc=$?"
PYTHONPATH=$PWD/python timeout 150 torchrun --nproc-per-node=2 benchmarks/bench_moe_layer.py --tokens 128,512,2048 \
  --counts "drawn;0/128" --phases dispatch,combine,dispatch-bwd,combine-bwd --out $OUT/unequal > $L/unequal.log 2>&1
log "unequal rc=$?"
cd $OUT && tar czf all.tar.gz logs graph layer unequal && rm -rf logs graph layer unequal
log done
