#!/usr/bin/env bash
# Session 23, call 5, nvidia-h100-x4: the whole GPU suite at world 4 on main (25b8df6: the acquire-first looks and
# spin_bounded under every wait), then bench_graph at README's forward shapes, counts drawn, with the floor. Nothing to
# carry: it builds main in place.
source tools/device_call.sh
timeout 380 bash tools/gpu_run.sh $OUT/suite build,tests > $L/suite-driver.log 2>&1
log "suite rc=$?"; cp $OUT/suite/summary.txt $OUT/suite-summary.txt
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
PYTHONPATH=$PWD/python timeout 100 torchrun --nproc-per-node=4 benchmarks/bench_graph.py --shapes "$S" --counts drawn \
  --out $OUT/graph > $L/graph.log 2>&1
log "graph rc=$?"; grep -A 14 -E "^ *shape " $L/graph.log > $OUT/graph-table.txt
cd $OUT && tar czf all.tar.gz logs suite graph && rm -rf logs suite graph
log done
