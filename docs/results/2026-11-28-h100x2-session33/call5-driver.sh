#!/usr/bin/env bash
# Session 33, call 5: nvidia-h100-x2, the last ~370 s of the budget. README's performance table on the landed kernels
# (call 3's fold tree), floors and eager times in the same runs: the ten drawn shapes, DeepSeek-V3 128 tokens with
# issue 35's pairs, and the 4096 rows if the time is left (call 1 has them on 3ef411b otherwise).
# Setup (here): .exp/fold from the working tree (git stash create | git archive); rm -rf .exp/*/docs.
# carry [".exp/fold"].
source tools/device_call.sh
BUILD_TIMEOUT=150 bash tools/build_trees.sh $L .exp/fold >> $OUT/driver.log
log "built rc=$?"
export BENCH_TREE=.exp/fold
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
bench graph 60 benchmarks/bench_graph.py --shapes "$S" --counts drawn
grep -A 14 -E "^ *shape " $L/graph.log > $OUT/graph-table.txt
bench pairs 60 benchmarks/bench_graph.py --shapes 256,8,7168,128 --counts issue35
grep -A 14 -E "^ *shape " $L/pairs.log > $OUT/pairs-table.txt
if [ $((SECONDS - T0)) -lt 170 ]; then
  bench big 60 benchmarks/bench_graph.py --shapes 256,8,7168,4096 --counts "max;drawn;64/4096" --fp8 e4m3fn
  grep -A 8 -E "^ *shape " $L/big.log > $OUT/big-table.txt
fi
cd $OUT && tar cJf all.tar.xz logs graph pairs big 2> /dev/null; rm -rf logs graph pairs big
log done
