#!/usr/bin/env bash
# Call 2 of session 36: nvidia-h200-x2. The tree of main as call 1 ran it (7eaa8b7): profile_decode.py (per-kernel
# device time of bench_hf_model's decode step, (a) and (b), eager and graph, B = 1 and 8), then the whole GPU suite
# twice more (issue 35's "three runs in a row" with call 1's). carry [".exp/rel", ".exp/hooks"].
source tools/device_call.sh
R=docs/results/2026-11-28-h200x2-session36
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/rel .exp/hooks:hooks >> $OUT/driver.log
log "built rc=$?"
PYTHONPATH=$PWD/.exp/rel/python:$PWD/.exp/rel/benchmarks bounded 150 torchrun --nproc-per-node=2 \
  $R/profile_decode.py $OUT/profile 1 8 > $L/profile.log 2>&1
log "profile rc=$?"
cp $OUT/profile/summary-rank0.txt $OUT/profile-summary.txt 2> /dev/null
for n in 2 3; do
  bounded 200 bash -c "cd .exp/hooks && bash tools/gpu_run.sh $L/suite$n tests > $L/suite$n.log 2>&1"
  log "suite$n rc=$? $(grep -E '^-- gpu_tests' $L/suite$n/summary.txt)"
done
cd $OUT && tar cJf all.tar.xz logs profile 2> /dev/null; rm -rf logs profile
log done
