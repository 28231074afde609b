#!/usr/bin/env bash
# Written in session 28; ran in session 29 as call 2, with a negative-control tree added (../2026-11-27-h100x2-session29/call2-driver.sh). nvidia-h100-x2, about 450 s with the start.
# Issue 40: the backward of dispatch / forward combine is 1.15x at 128 tokens (call 3). Its sending blocks first wait
# for every rank's start signal (a release and a flight, about 2 us at world 2). Right after a backward of combine,
# autograd's order in training, that wait proves nothing new: the rank ended the backward of combine only after a
# signal from every peer's backward of combine, a kernel each ran after its last combine.
# dbw = main + next-dbwd-no-wait-after-cbwd.patch: EpEngine::dispatch_backward waits only when the engine's last round
# was not a backward of combine; protocol.md; test_round_order.py's new test (the wait kept after a forward round:
# rank 0's backward of dispatch would overwrite the partial sums that the others hold back their combine_recv from).
# 1. the layer's rounds, base against dbw, two rounds: dispatch-bwd-train (main's bench_moe_layer: the backward of
#    dispatch right after a backward of combine) should drop by about the wait, dispatch-bwd (after a forward round)
#    stay. 2. dbw's tests (hooks): test_round_order, test_autograd, test_moe_layer, test_faults; 3. the new round-order
#    test on main's library too (baseh with dbw's test file), which must pass there as well.
# Setup (here): for t in base dbw dbwh baseh: mkdir -p .exp/$t && git archive HEAD | tar -x -C .exp/$t; then
# (cd .exp/dbw && patch -p1 < ../../docs/results/2026-11-27-h100x2-session28/next-dbwd-no-wait-after-cbwd.patch),
# the same for dbwh; cp .exp/dbwh/tests/python/gpu/test_round_order.py .exp/baseh/tests/python/gpu/;
# rm -rf .exp/*/docs. carry [".exp/base", ".exp/dbw", ".exp/dbwh", ".exp/baseh"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/base .exp/dbw .exp/dbwh:hooks .exp/baseh:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 128,512,2048 --phases combine,dispatch-bwd,combine-bwd,dispatch-bwd-train" \
  ab layer 200 .exp/base .exp/dbw
GPU_TESTS="tests/python/gpu/test_round_order.py tests/python/gpu/test_autograd.py tests/python/gpu/test_moe_layer.py \
tests/python/gpu/test_faults.py" bounded 220 bash -c "cd .exp/dbwh && bash tools/gpu_run.sh $L/dbw-tests tests \
  > $L/dbw-tests.log 2>&1"
log "dbw tests rc=$?"
cp $L/dbw-tests/summary.txt $OUT/dbw-tests-summary.txt 2> /dev/null
GPU_TESTS=tests/python/gpu/test_round_order.py bounded 70 bash -c \
  "cd .exp/baseh && bash tools/gpu_run.sh $L/base-order tests -k backward_of_dispatch > $L/base-order.log 2>&1"
log "base round-order rc=$?"
cp $L/base-order/summary.txt $OUT/base-order-summary.txt 2> /dev/null
cd $OUT && tar czf all.tar.gz logs layer 2> /dev/null; rm -rf logs layer
log done
