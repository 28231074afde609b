#!/usr/bin/env bash
# Session 45, call 4 (one H200; correctness only), on 66c1926: README's two quick-start commands as a newcomer types
# them on a GPU node (here one with one GPU: the tests at world 2 time-sliced, the benchmark steps skipped, the
# profiler's build and its tests), bounded by what is left of 540 s.
source tools/device_call.sh
left() { echo $((540 - (SECONDS - T0))); }
bounded 200 pip install --no-build-isolation -e . > $L/pip.log 2>&1
log "pip install rc=$?"
tail -3 $L/pip.log > $OUT/pip-tail.txt
bounded "$(left)" bash tools/gpu_run.sh $L/out > $L/gpu_run.log 2>&1
log "gpu_run.sh all rc=$?"
cp $L/out/summary.txt $OUT/all-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
