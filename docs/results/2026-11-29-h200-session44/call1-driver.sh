#!/usr/bin/env bash
# Prepared, not run (session 43's device time was spent): what is left of the odd worlds, for a session that has one
# GPU only, on main with next-num-sms-check.patch applied (AllToAll(num_sms=) past the device's compute units raises
# at construction; written after session 43's last call, so kept out of main until its GPU test has run). The ranks
# time-sliced on the GPU (correctness only). That patch's GPU test, the sanitizers at world 3 (SANITIZE_RANKS, all
# four tools; at world 2 each took about 15 s), the soak at world 3 for 2 minutes, then test_transformers.py at world
# 5, each bounded by what is left of 560 s. If its test passes, land the patch (its CPU test is in it).
source tools/device_call.sh
patch -p1 < docs/results/2026-11-29-h200-session43/next-num-sms-check.patch >> $OUT/driver.log 2>&1
log "num_sms patch applied rc=$?"
left() { echo $((560 - (SECONDS - T0))); }
bounded 120 bash tools/gpu_run.sh $L/build build > $L/build.log 2>&1
log "build rc=$?"
GPU_TESTS="tests/python/gpu/test_all_to_all.py::test_more_blocks_than_compute_units_raises" \
  bounded 60 bash tools/gpu_run.sh $L/sms tests > $L/sms.log 2>&1
log "num_sms test at world 2 rc=$?"
cp $L/sms/summary.txt $OUT/sms-summary.txt 2> /dev/null
SANITIZE_RANKS=3 SANITIZE_TOOL_LIMIT_S=75 bounded 320 bash tools/sanitize.sh $L/san3 > $L/san3.log 2>&1
log "sanitizers at world 3 rc=$?"
grep "^-- sanitize" $L/san3.log > $OUT/san3-summary.txt
SOAK_MINUTES=2 ONE_GPU_RANKS=3 bounded "$(left)" bash tools/gpu_run.sh $L/soak3 soak > $L/soak3.log 2>&1
log "soak at world 3 rc=$?"
cp $L/soak3/summary.txt $OUT/soak3-summary.txt 2> /dev/null
ONE_GPU_RANKS=5 GPU_TESTS="tests/python/gpu/test_transformers.py" bounded "$(left)" bash tools/gpu_run.sh $L/w5 tests -rs \
  > $L/w5.log 2>&1
log "world 5 test_transformers rc=$?"
cp $L/w5/summary.txt $OUT/w5-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
