#!/usr/bin/env bash
# Session 35, call 4 (2 x H200: nvidia-h200-x2 was lent after call 3, with about 470 s of device time left).
# Trees: base = main 47a75f1 (session 34's grouped_gemv), fin2 = the tree to land (call 3's fin + the 1-row kernel
# below 0.1 rows an expert). bench_hf_model.py, all three systems a run: fin2, base, fin2. The test suite did not run
# on two GPUs this session (no time); call 3 ran fin's grouped_gemv, transformers and MoE-layer tests on one GPU.
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/base .exp/fin2 >> $OUT/driver.log
log "built rc=$?"
BENCH_TREE=.exp/fin2 bench hf-fin2 100 benchmarks/bench_hf_model.py
BENCH_TREE=.exp/base bench hf-base 100 benchmarks/bench_hf_model.py
[ $((SECONDS - T0)) -lt 230 ] && BENCH_TREE=.exp/fin2 bench hf-fin2-2 100 benchmarks/bench_hf_model.py
for r in hf-fin2 hf-base hf-fin2-2; do
  echo "== $r"; grep -B1 -A4 "^B/rank  prefill vs" $L/$r.log; grep -A11 "^B/rank  *system" $L/$r.log | head -12
done > $OUT/hf-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs hf-* --exclude=hf-summary.txt 2> /dev/null; rm -rf logs hf-fin2 hf-base hf-fin2-2
log done
