#!/usr/bin/env bash
# Session 42, call 4 (one H200): bench_moe_layer's CUDA-graph phases (graph-fwd, graph-train), a smoke run with 2
# ranks time-sliced on the one GPU (MOE_A2A_TEST_ONE_GPU=1): does the training step capture and replay, every rank at
# one count and with counts drawn. Its times mean nothing (time slices); the two-GPU numbers wait for a two-GPU call.
source tools/device_call.sh
bounded 200 env MOE_A2A_PROFILE=0 MOE_A2A_TEST_HOOKS=0 MAX_JOBS=16 python3 setup.py build_ext --inplace --force \
  > $L/build.log 2>&1
log "built rc=$?"
MOE_A2A_TEST_ONE_GPU=1 BENCH_NPROC=2 bench layer 240 benchmarks/bench_moe_layer.py --tokens 128,512 \
  --counts "max;drawn" --phases dispatch,combine,combine-bwd,dispatch-bwd,graph-fwd,graph-train --iters 10 --no-floor \
  --no-check
tail -40 $L/layer.log > $OUT/layer-tail.txt
cd $OUT && tar cJf all.tar.xz logs layer 2> /dev/null; rm -rf logs layer
log done
