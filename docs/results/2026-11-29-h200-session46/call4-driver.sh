#!/usr/bin/env bash
# Session 46's call 4 (one H200): call 3's profiler tests at world 8 timed out (test_trace_of_real_run, 150 s: ranks
# 1-5 done, rank 0 still ping-ponging with 6 and 7, the clock sync one peer after another). The clock sync now runs
# every peer's chain at once (csrc/profiler/clock_sync.cu). Here: the profiler's build, its GPU tests at world 8, then
# at world 2 (one peer: the chains as before), eight and two ranks time-sliced on the GPU (correctness only).
source tools/device_call.sh
ONE_GPU_RANKS=8 bounded 330 bash tools/gpu_run.sh $L/w8 profile -rs > $L/w8.log 2>&1
log "profiler build and tests at world 8 rc=$?"
cp $L/w8/summary.txt $OUT/w8-summary.txt 2> /dev/null
MOE_A2A_TEST_ONE_GPU=1 PYTHONPATH=$PWD/python bounded 90 torchrun --nproc-per-node=2 -m pytest \
  tests/python/gpu/test_profiler.py -q -rs -p no:cacheprovider > $L/w2.log 2>&1
log "profiler tests at world 2 rc=$?"
tail -4 $L/w2.log > $OUT/w2-tail.txt
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
