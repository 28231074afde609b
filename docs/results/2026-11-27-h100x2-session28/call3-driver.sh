#!/usr/bin/env bash
# Session 28, call 3, nvidia-h100-x2: README's tables on main (4391143) in one run each, and combine's router weights
# loaded beside the rows (weights-with-rows.patch) against main.
# 1. main (.exp/base): bench_graph at README's ten forward shapes, counts drawn, with floors and eager times;
#    DeepSeek-V3 at 128 tokens with issue 35's pairs; DeepSeek-V3 at 4096 tokens, every rank and drawn and 64/4096,
#    bf16 and fp8 e4m3fn (eager dispatch alone for issue 35's fp8 row), with floors; bench_moe_layer's training table
#    (128 / 512 / 2048 every rank) and drawn / 0/128.
# 2. wl = main + weights-with-rows.patch: graph d+c A/B against main, the ten shapes (two rounds), 4096 drawn (one).
# 3. wl's tests (hooks build): test_all_to_all.py, test_autograd.py, test_fp8.py.
# Setup (here): for t in base wl wlh: mkdir -p .exp/$t && git archive HEAD | tar -x -C .exp/$t; patch -p1 wl and wlh
# with weights-with-rows.patch; rm -rf .exp/*/docs. carry [".exp/base", ".exp/wl", ".exp/wlh"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/base .exp/wl .exp/wlh:hooks >> $OUT/driver.log
log "built rc=$?"
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
P=$PWD/.exp/base/python
bench() {  # bench NAME SECONDS SCRIPT ARGS...: one torchrun of main's package, bounded, into $OUT/NAME
  local name=$1 seconds=$2
  PYTHONPATH=$P bounded "$seconds" torchrun --nproc-per-node=2 "${@:3}" --out $OUT/$name > $L/$name.log 2>&1
  log "$name rc=$?"
}
bench graph 90 benchmarks/bench_graph.py --shapes "$S" --counts drawn
grep -A 14 -E "^ *shape " $L/graph.log > $OUT/graph-table.txt
bench pairs 90 benchmarks/bench_graph.py --shapes 256,8,7168,128 --counts issue35
bench big 170 benchmarks/bench_graph.py --shapes 256,8,7168,4096 --counts "max;drawn;64/4096" --fp8 e4m3fn
bench layer 60 benchmarks/bench_moe_layer.py --tokens 128,512,2048
bench unequal 60 benchmarks/bench_moe_layer.py --tokens 128,512,2048 --counts "drawn;0/128" \
  --phases dispatch,combine,dispatch-bwd,combine-bwd
export AB_BUILT=1 AB_ROUNDS=2
AB_GRAPH_ARGS="--shapes $S --counts drawn" ab ab 90 .exp/base .exp/wl
AB_ROUNDS=1 AB_GRAPH_ARGS="--shapes 256,8,7168,4096 --counts drawn" ab ab4096 70 .exp/base .exp/wl
left=$((555 - (SECONDS - T0)))
GPU_TESTS="tests/python/gpu/test_all_to_all.py tests/python/gpu/test_autograd.py tests/python/gpu/test_fp8.py" \
  bounded $left bash -c "cd .exp/wlh && bash tools/gpu_run.sh $L/wl-tests tests > $L/wl-tests.log 2>&1"
log "wl tests rc=$?"
cp $L/wl-tests/summary.txt $OUT/wl-tests-summary.txt 2> /dev/null
cd $OUT && tar czf all.tar.gz logs graph pairs big layer unequal ab ab4096 2> /dev/null
rm -rf logs graph pairs big layer unequal ab ab4096
log done
