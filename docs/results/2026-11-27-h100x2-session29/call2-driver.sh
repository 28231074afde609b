#!/usr/bin/env bash
# Session 29, call 2, nvidia-h100-x2, about 560 s with the start.
# Issue 40: the backward of dispatch / forward combine is 1.15x at 128 tokens (session 28, call 3). Its sending blocks
# first wait for every rank's start signal. Right after a backward of combine, autograd's order in training, that wait
# proves nothing new: the rank ended the backward of combine only after a signal from every peer's backward of combine,
# a kernel each ran after its last combine.
# base = main 71d683d (the start signal relaxed, call 1). dbw = base + session 28's next-dbwd-no-wait-after-cbwd.patch
# (EpEngine::dispatch_backward waits only when the engine's last round was not a backward of combine; a new
# test_round_order test: the wait kept after a forward round). nowh = dbwh with the wait never taken (a negative
# control: the new test must fail there). baseh = base with dbw's test file (the test must pass on main too).
# 1. the layer's rounds, base against dbw, two rounds: dispatch-bwd-train (the backward of dispatch right after a
#    backward of combine) should drop by about the wait, dispatch-bwd (after a forward round) stay.
# 2. dbw's tests (hooks): test_round_order, test_autograd, test_moe_layer, test_faults. 3. the new test on baseh (pass)
#    and nowh (fail). 4. main's README table: bench_graph at the ten README shapes, floors and eager times.
# Setup (here): for t in base dbw dbwh baseh: mkdir -p .exp/$t && git archive HEAD | tar -x -C .exp/$t; patch -p1 dbw
# and dbwh with ../2026-11-27-h100x2-session28/next-dbwd-no-wait-after-cbwd.patch; cp
# .exp/dbwh/tests/python/gpu/test_round_order.py .exp/baseh/tests/python/gpu/; cp -a .exp/dbwh/. .exp/nowh/ and set
# a.await_ready = false in .exp/nowh/csrc/ep/engine.cu; rm -rf .exp/*/docs.
# carry [".exp/base", ".exp/dbw", ".exp/dbwh", ".exp/baseh", ".exp/nowh"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/base .exp/dbw .exp/dbwh:hooks .exp/baseh:hooks .exp/nowh:hooks \
  >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 128,512,2048 --phases combine,dispatch-bwd,combine-bwd,dispatch-bwd-train" \
  ab layer 180 .exp/base .exp/dbw
GPU_TESTS="tests/python/gpu/test_round_order.py tests/python/gpu/test_autograd.py tests/python/gpu/test_moe_layer.py \
tests/python/gpu/test_faults.py" bounded 150 bash -c "cd .exp/dbwh && bash tools/gpu_run.sh $L/dbw-tests tests \
  > $L/dbw-tests.log 2>&1"
log "dbw tests rc=$?"
cp $L/dbw-tests/summary.txt $OUT/dbw-tests-summary.txt 2> /dev/null
for t in baseh nowh; do
  GPU_TESTS=tests/python/gpu/test_round_order.py bounded 60 bash -c \
    "cd .exp/$t && bash tools/gpu_run.sh $L/$t-order tests -k backward_of_dispatch > $L/$t-order.log 2>&1"
  log "$t round-order rc=$?"
  grep -hE "passed|failed|error" $L/$t-order/summary.txt $L/$t-order.log 2> /dev/null | tail -4 >> $OUT/order-tests.txt
done
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
left=$((540 - (SECONDS - T0)))
PYTHONPATH=$PWD/.exp/base/python bounded $left torchrun --nproc-per-node=2 benchmarks/bench_graph.py --shapes "$S" \
  --counts drawn --out $OUT/graph > $L/graph.log 2>&1
log "graph rc=$?"
grep -A 14 -E "^ *shape " $L/graph.log > $OUT/graph-table.txt
cd $OUT && tar czf all.tar.gz logs layer graph 2> /dev/null; rm -rf logs layer graph
log done
