#!/usr/bin/env bash
# Session 42, call 5 (one H200): the split senders under compute-sanitizer, and the tree that would land them.
# s33h: session 41's patch (as in call 1), MOE_A2A_BWD_SENDERS=1. land: a1dbbab + the split as it would land
# (call5-land.patch: the split passed to the kernel as a parameter, a quarter of the blocks sending, at least one,
# so the 2-block grids of the tests and the soak's run it with no setting), plus call 3's new test.
# tools/sanitize.sh: the soak's sanitize rounds (a 2-block grid among them) under memcheck, racecheck, synccheck and
# initcheck, 2 ranks on the one GPU. Then land's test_autograd.py at world 2 and 4.
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/s33h:hooks .exp/land:hooks >> $OUT/driver.log
log "built rc=$?"
(cd .exp/s33h && MOE_A2A_BWD_SENDERS=1 bounded 200 bash tools/sanitize.sh $L/san-s33h) > $L/san-s33h.log 2>&1
log "sanitize s33h rc=$?"
(cd .exp/land && bounded 200 bash tools/sanitize.sh $L/san-land) > $L/san-land.log 2>&1
log "sanitize land rc=$?"
grep -h "^-- sanitize" $L/san-s33h.log $L/san-land.log >> $OUT/driver.log
GPU_TESTS=tests/python/gpu/test_autograd.py bounded 120 bash -c "cd .exp/land && bash tools/gpu_run.sh $L/land-w2 tests" \
  > $L/land-w2.log 2>&1
log "land world 2 rc=$?"
ONE_GPU_RANKS=4 GPU_TESTS=tests/python/gpu/test_autograd.py bounded 100 \
  bash -c "cd .exp/land && bash tools/gpu_run.sh $L/land-w4 tests" > $L/land-w4.log 2>&1
log "land world 4 rc=$?"
cat $L/land-w2/summary.txt $L/land-w4/summary.txt >> $OUT/driver.log 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
