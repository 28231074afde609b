#!/usr/bin/env bash
# Prepared for the next session (not run): nvidia-h100-x2 (or one GPU: bench_experts uses GPU 0 only), about 320 s
# with the start. grouped_gemv at 8 tokens a rank (issue 37's B = 8, 1.24x of transformers EP on 2 x H200) ran at
# about 1.33x its floor on bench_hf_model's model. Two variants against main, in one call, alternated:
#   next-gemv-unroll4.patch  four 16-byte loads of each column in flight a lane instead of two (bf16 registers a
#                            thread 128 / 80 / 56 -> 136 / 90 / 60 at 4 / 2 / 1 rows a pass: 2 blocks an SM at 2 rows,
#                            not 3)
#   next-gemv-cols8.patch    8 columns a wave instead of 4 (an x vector serves twice the columns; 190 / 115 / 98
#                            registers: 1 block an SM at 4 rows a pass)
# A variant is worth keeping where bench_experts' rule-chosen column (2 rows a pass up to 1.5 rows an expert, else 4)
# drops at every shape; then bench_hf_model on it.
# Setup (here): mkdir -p .exp/{main,u4,c8}; main's tree into each (git archive HEAD | tar -x -C), docs left out;
# (cd .exp/u4 && patch -p1 -s < ../../docs/results/2026-11-28-h100x2-session34/next-gemv-unroll4.patch); the same
# for c8 with next-gemv-cols8.patch. carry [".exp/main", ".exp/u4", ".exp/c8"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/main .exp/u4 .exp/c8 >> $OUT/driver.log
log "built rc=$?"
for t in main u4 c8 main-2 u4-2 c8-2; do
  (cd .exp/${t%-2} && PYTHONPATH=$PWD/python bounded 90 python3 benchmarks/bench_experts.py --tokens 1,2,4,8,16,32 \
    --json $OUT/bench_experts-$t.json) > $OUT/bench_experts-$t.log 2>&1
  log "bench_experts $t rc=$?"
done
log done
