#!/usr/bin/env bash
# Session 47's call 5 (one H200, the session's last 267 s of device time): the heap's close handshake in one wave
# (ef6dba0) at world 8, where it answers seven peers: test_heap, test_lifetime and test_reused_workers with eight ranks
# time-sliced on the GPU (correctness only), on the final library (c54dd95). Bounded by 190 s.
source tools/device_call.sh
files="tests/python/gpu/test_heap.py tests/python/gpu/test_lifetime.py tests/python/gpu/test_reused_workers.py"
ONE_GPU_RANKS=8 GPU_TESTS="$files" bounded 190 bash tools/gpu_run.sh $L/w8 build,tests -rs > $L/w8.log 2>&1
log "build, then heap, lifetime, reused workers at world 8 rc=$?"
cp $L/w8/summary.txt $OUT/w8-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
