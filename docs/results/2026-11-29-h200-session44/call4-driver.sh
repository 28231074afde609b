#!/usr/bin/env bash
# Session 44, call 4 (one H200; ranks time-sliced: correctness only), on e4ae92c: the whole GPU suite at world 3 (the
# tests changed since session 43's whole-suite run: the num_sms check's test, test_round_checks' explainer, the
# fixed fp8 out check), then the soak's fp8 shape at world 8 (experts' factors up to 8, where the old check's bound
# was tightest) for what is left of 520 s.
source tools/device_call.sh
left() { echo $((520 - (SECONDS - T0))); }
ONE_GPU_RANKS=3 bounded 330 bash tools/gpu_run.sh $L/w3 build,tests -rs > $L/w3.log 2>&1
log "whole suite at world 3 rc=$?"
cp $L/w3/summary.txt $OUT/w3-summary.txt 2> /dev/null
export MOE_A2A_TEST_ONE_GPU=1
minutes=$(python3 -c "print(max(0.2, ($(left) - 60) / 60))")
bounded "$(left)" torchrun --nproc-per-node=8 tools/soak.py --shapes 7 --seed 3 --max-minutes "$minutes" > $L/w8-fp8.log 2>&1
log "soak w8-fp8 ($minutes min) rc=$?"
grep -E "^SOAK_RESULT|rounds failed|out on the host|token [0-9]+ \(|^round |stopping" $L/w8-fp8.log | sort -u \
  | head -40 > $OUT/w8-fp8.txt
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
