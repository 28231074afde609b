#!/usr/bin/env bash
# Session 29, call 5, nvidia-h100-x4, about 230 s with the start: main's changes of this session at world 4, the tests
# they touch (the relaxed start signal: every flagged combine and backward of dispatch; the backward of dispatch's
# wait only after a round that was not a backward of combine: test_round_order.py's new test, every rank a different
# count). Builds main (hooks) in place; nothing to carry.
source tools/device_call.sh
GPU_TESTS="tests/python/gpu/test_round_order.py tests/python/gpu/test_autograd.py tests/python/gpu/test_moe_layer.py" \
  bounded 200 bash tools/gpu_run.sh $OUT/suite build,tests > $L/suite-driver.log 2>&1
log "tests rc=$?"; cp $OUT/suite/summary.txt $OUT/tests-summary.txt 2> /dev/null
cd $OUT && tar czf all.tar.gz logs suite 2> /dev/null; rm -rf logs suite
log done
