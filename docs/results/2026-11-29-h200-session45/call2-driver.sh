#!/usr/bin/env bash
# Session 45, call 2 (one H200; ranks time-sliced: correctness only), on 66c1926: the whole GPU suite at world 2, the
# world of the two-GPU machines (the suite last ran whole at world 2 on two GPUs in session 40; since then the tests
# changed: the num_sms check's test, the soak's fixed fp8 out check and its explainer, 66c1926's per-value bound).
source tools/device_call.sh
bounded 540 bash tools/gpu_run.sh $L/w2 build,tests -rs > $L/w2.log 2>&1
log "whole suite at world 2 rc=$?"
cp $L/w2/summary.txt $OUT/w2-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
