#!/usr/bin/env bash
# Session 47's call 3 (one H200): the tree with this session's wave64 mends (combine's unit batch tests s < world
# before it shifts the 32-bit source mask, the heap's close handshake one wave; the rest static_asserts) and the turns'
# die stride (no change in NVIDIA's machine code): the whole GPU suite at world 2, then the files that run combine's
# unit batches and the close handshake most (test_all_to_all, test_autograd, test_lifetime) at world 8 with what is
# left of 560 s. Ranks time-sliced on the GPU: correctness only.
source tools/device_call.sh
left() { echo $((560 - (SECONDS - T0))); }
bounded 330 bash tools/gpu_run.sh $L/w2 build,tests -rs > $L/w2.log 2>&1
log "build and the whole suite at world 2 rc=$?"
cp $L/w2/summary.txt $OUT/w2-summary.txt 2> /dev/null
files="tests/python/gpu/test_all_to_all.py tests/python/gpu/test_autograd.py tests/python/gpu/test_lifetime.py"
ONE_GPU_RANKS=8 GPU_TESTS="$files" bounded "$(left)" bash tools/gpu_run.sh $L/w8 tests -rs > $L/w8.log 2>&1
log "all_to_all, autograd, lifetime at world 8 rc=$?"
cp $L/w8/summary.txt $OUT/w8-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
