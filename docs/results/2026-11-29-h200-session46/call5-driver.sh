#!/usr/bin/env bash
# Session 46's call 5 (one H200): the concurrent clock sync (call 4) in a traced run: the profiler's build and tests at
# world 2, then the traced benchmark under the MPS proxy (two ranks at once on GPU 0, DeepSeek-V3 shape at 1 and 128
# tokens): its clock alignment error next to call 3's (0.70 and 0.69 us, the chains one peer after another; at world
# 2 there is one peer either way).
source tools/device_call.sh
bounded 300 bash tools/gpu_run.sh $L/p profile,proxy -rs > $L/p.log 2>&1
log "profiler build, tests, proxy benchmark and traced benchmark at world 2 rc=$?"
cp $L/p/summary.txt $OUT/p-summary.txt 2> /dev/null
rm -f $L/p/*.png
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
