#!/usr/bin/env bash
# Session 43, call 2 (one H200): the whole GPU suite at world 3 (ranks time-sliced on the GPU; correctness only), after
# call 1 found 49 tests that refused world 3 with a fixed number of experts (64, 32, 16 or 8) and now take
# experts_for(E, world). -rs names every skip.
source tools/device_call.sh
ONE_GPU_RANKS=3 bounded 540 bash tools/gpu_run.sh $L/w3 build,tests -rs > $L/w3.log 2>&1
log "build + world 3 suite rc=$?"
cp $L/w3/summary.txt $OUT/w3-summary.txt 2> /dev/null
grep -E "^SKIPPED" $L/w3/gpu_tests.log | sed -e 's/^SKIPPED \[[0-9]*\] //' | sort | uniq -c > $OUT/w3-skips.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
