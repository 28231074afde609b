#!/usr/bin/env bash
# Session 44, call 5 (one H200, the session's last 320 s of device time): call 4's soak of the fp8 shape at world 8
# on one GPU stopped at round ~499 when rank 1 ran out of memory (8 processes x 17.5 GB): the window of GPU checks
# held each round's Outcome whole, its dispatch's caller-owned rows included (29 MB a round there). It now holds the
# spec and out only. The same soak again (seed 3), for what is left of 230 s.
source tools/device_call.sh
left() { echo $((230 - (SECONDS - T0))); }
bounded 100 bash tools/gpu_run.sh $L/build build > $L/build.log 2>&1
log "build rc=$?"
export MOE_A2A_TEST_ONE_GPU=1
minutes=$(python3 -c "print(max(0.2, ($(left) - 50) / 60))")
bounded "$(left)" torchrun --nproc-per-node=8 tools/soak.py --shapes 7 --seed 3 --max-minutes "$minutes" > $L/w8-fp8.log 2>&1
log "soak w8-fp8 ($minutes min) rc=$?"
grep -E "^SOAK_RESULT|rounds failed|out on the host|token [0-9]+ \(|^round |stopping|Error" $L/w8-fp8.log | sort -u \
  | head -40 > $OUT/w8-fp8.txt
nvidia-smi --query-gpu=memory.used --format=csv >> $OUT/driver.log 2>&1
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
