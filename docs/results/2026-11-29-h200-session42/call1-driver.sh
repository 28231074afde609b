#!/usr/bin/env bash
# Session 42, call 1 (one H200; no two-GPU kind was lent at the start): session 41's prepared split senders
# (../2026-11-28-h200x2-session41/next-split-senders.patch), correctness only, before any two-GPU call times it.
# Trees made here as next-driver.sh's header says; this call builds s33h alone (hooks). One GPU runs the ranks
# time-sliced: no speed is read from it. MOE_A2A_BWD_SENDERS=1: block 0 sends every group and the other blocks
# answer the own rows, in every grid of the gradient tests whose instance is the plain one (test_autograd.py's
# two-block grids too). World 2 (the gradient files), then world 4 (test_autograd.py).
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/s33h:hooks >> $OUT/driver.log
log "built rc=$?"
export MOE_A2A_BWD_SENDERS=1
GPU_TESTS="tests/python/gpu/test_autograd.py tests/python/gpu/test_all_to_all.py tests/python/gpu/test_moe_layer.py" \
  bounded 200 bash -c "cd .exp/s33h && bash tools/gpu_run.sh $L/w2 tests > $L/w2.log 2>&1"
log "world 2 tests rc=$?"
cp $L/w2/summary.txt $OUT/w2-summary.txt 2> /dev/null
left=$((400 - (SECONDS - T0)))
ONE_GPU_RANKS=4 GPU_TESTS="tests/python/gpu/test_autograd.py" \
  bounded $left bash -c "cd .exp/s33h && bash tools/gpu_run.sh $L/w4 tests > $L/w4.log 2>&1"
log "world 4 tests rc=$?"
cp $L/w4/summary.txt $OUT/w4-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
