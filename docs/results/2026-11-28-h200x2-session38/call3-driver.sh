#!/usr/bin/env bash
# Session 38, call 3 (nvidia-h200, one GPU: grouped_gemv is a one-GPU kernel): the along-in kernel's block size.
# .exp/gbase = main 4f57e58 (8 waves a block); .exp/gw4 = 4 waves a block (kRowWaves 4: 128 threads on NVIDIA);
# .exp/gw2 = 2 waves; .exp/gw4o = 4 waves and __launch_bounds__(128, 6) (80 registers, a few spilled: 6 blocks an SM).
# bench_experts.py in each, base first and last. About 330 s with the start.
# carry [".exp/gbase", ".exp/gw4", ".exp/gw2", ".exp/gw4o"].
source tools/device_call.sh
BUILD_TIMEOUT=240 bash tools/build_trees.sh $L .exp/gbase .exp/gw4 .exp/gw2 .exp/gw4o >> $OUT/driver.log
log "built rc=$?"
for t in gbase gw4 gw2 gw4o gbase; do
  n=$t; [ -e $OUT/$t.json ] && n=$t-again
  (cd .exp/$t && PYTHONPATH=python bounded 90 python3 benchmarks/bench_experts.py --tokens 1,2,8,16 \
    --json $OUT/$n.json > $L/experts-$n.log 2>&1)
  log "$n rc=$?"
done
for n in gbase gw4 gw2 gw4o gbase-again; do echo "== $n"; grep -A14 "^ *shape  w along" $L/experts-$n.log | grep -v "^---"; done \
  > $OUT/experts-summary.txt
cd $OUT && tar cJf all.tar.xz logs *.json 2> /dev/null; rm -rf logs *.json
log done
