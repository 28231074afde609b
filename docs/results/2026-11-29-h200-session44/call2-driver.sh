#!/usr/bin/env bash
# Session 44, call 2 (one H200; ranks time-sliced: correctness only). Call 1's soak at world 3 failed one round's
# GPU "out" check (round 1813 of seed 0, the fp8 shape E/rank=32 K=8 H=7168 packed/align 16, fused, rank 2). Now the
# soak's message explains a failed "out" (round_checks.explain_out: which tokens, where, and whether a token lacks or
# holds twice one expert rank's share) and tools/soak.py takes --shapes. This call: the explainer's GPU test at
# world 3, the same soak again (seed 0: is round 1813 a deterministic failure?), then the fp8 shape alone (index 7)
# at world 3 and at world 2, each bounded by what is left of 560 s.
source tools/device_call.sh
left() { echo $((560 - (SECONDS - T0))); }
bounded 120 bash tools/gpu_run.sh $L/build build > $L/build.log 2>&1
log "build rc=$?"
ONE_GPU_RANKS=3 GPU_TESTS="tests/python/gpu/test_round_checks.py" bounded 90 bash tools/gpu_run.sh $L/rc3 tests \
  > $L/rc3.log 2>&1
log "test_round_checks at world 3 rc=$?"
cp $L/rc3/summary.txt $OUT/rc3-summary.txt 2> /dev/null
export MOE_A2A_TEST_ONE_GPU=1
soak() {  # soak NAME RANKS SECONDS ARGS...
  bounded "$3" torchrun --nproc-per-node=$2 tools/soak.py "${@:4}" > $L/$1.log 2>&1
  log "soak $1 rc=$?"
  grep -E "^SOAK_RESULT|rounds failed|out on the host|token [0-9]+ \(|^round |stopping" $L/$1.log | sort -u \
    | head -40 > $OUT/$1.txt
}
soak w3-seed0 3 170 --seed 0 --max-minutes 2
soak w3-fp8-seed1 3 "$(($(left) - 110))" --shapes 7 --seed 1 --max-minutes 2.5
soak w2-fp8-seed1 2 "$(left)" --shapes 7 --seed 1 --max-minutes 1.3
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
