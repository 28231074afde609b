#!/usr/bin/env bash
# Session 43, call 5 (one H200; ranks time-sliced, correctness only): what call 4's world-3 suite skipped for want of
# the profiler's build: gpu_run.sh's `profile` step (the extension rebuilt with MOE_A2A_PROFILE=1, then
# test_profiler.py) and test_current_device.py on that build, at world 3.
source tools/device_call.sh
ONE_GPU_RANKS=3 bounded 200 bash tools/gpu_run.sh $L/w3 profile -rs > $L/w3.log 2>&1
log "profiler build + world 3 test_profiler rc=$?"
cp $L/w3/summary.txt $OUT/w3-summary.txt 2> /dev/null
MOE_A2A_TEST_ONE_GPU=1 PYTHONPATH=$PWD/python bounded 60 torchrun --nproc-per-node=3 -m pytest \
  tests/python/gpu/test_current_device.py -q -rs -p no:cacheprovider > $L/w3-current-device.log 2>&1
log "world 3 test_current_device (profiler build) rc=$?"
tail -5 $L/w3-current-device.log > $OUT/w3-current-device-tail.txt
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
