#!/usr/bin/env bash
# Session 34, call 1: nvidia-h100-x2, about 420 s with the start. Issue 37: the experts' small-rows linear layer
# (grouped_gemv) of the working tree, first run on a GPU.
# 1. Its GPU test (2 ranks, each on its own GPU) and test_transformers.py (the integration uses it at decode).
# 2. benchmarks/bench_experts.py on GPU 0: torch._grouped_mm against grouped_gemv at every rows_per_pass, next to
#    the active experts' weight bytes at the run's copy bandwidth.
# 3. bench_hf_model.py: all three systems with grouped_gemv, then (a) alone without it (MOE_A2A_GROUPED_GEMV=0) and
#    with it again (the drift between two runs of one tree).
# Setup (here): mkdir -p .exp/{rel,hooks}; the working tree into each (git stash create | git archive);
# rm -rf .exp/*/docs. carry [".exp/rel", ".exp/hooks"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/rel .exp/hooks:hooks >> $OUT/driver.log
log "built rc=$?"
(cd .exp/hooks && PYTHONPATH=$PWD/python bounded 150 torchrun --nproc-per-node=2 -m pytest -q \
  tests/python/gpu/test_grouped_gemv.py tests/python/gpu/test_transformers.py) > $L/tests.log 2>&1
log "tests rc=$? $(grep -E '(passed|failed)' $L/tests.log | tail -n 1)"
(cd .exp/rel && PYTHONPATH=$PWD/python bounded 150 python3 benchmarks/bench_experts.py --json $OUT/bench_experts.json) \
  > $OUT/bench_experts.log 2>&1
log "bench_experts rc=$?"
BENCH_TREE=.exp/rel bench hf 150 benchmarks/bench_hf_model.py
MOE_A2A_GROUPED_GEMV=0 BENCH_TREE=.exp/rel bench hf-a-grouped_mm 80 benchmarks/bench_hf_model.py --systems moe_a2a
BENCH_TREE=.exp/rel bench hf-a-gemv 80 benchmarks/bench_hf_model.py --systems moe_a2a
cd $OUT && tar cJf all.tar.xz logs hf hf-a-grouped_mm hf-a-gemv 2> /dev/null; rm -rf hf hf-a-grouped_mm hf-a-gemv
log done
