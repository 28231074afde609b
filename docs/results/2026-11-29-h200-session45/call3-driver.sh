#!/usr/bin/env bash
# Session 45, call 3 (one H200; ranks time-sliced: correctness only), on 66c1926: the whole GPU suite at world 4 (last
# whole at world 4 on 4 x H100 in session 16; since then at worlds 2 and 3 only, and some files at 5-7 in session 43).
source tools/device_call.sh
ONE_GPU_RANKS=4 bounded 540 bash tools/gpu_run.sh $L/w4 build,tests -rs > $L/w4.log 2>&1
log "whole suite at world 4 rc=$?"
cp $L/w4/summary.txt $OUT/w4-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
