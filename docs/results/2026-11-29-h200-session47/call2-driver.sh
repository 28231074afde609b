#!/usr/bin/env bash
# Session 47's call 2 (one H200): the first GPU runs of session 46's last changes and this session's first. transformers'
# smoke run with eight ranks (bench_hf_model.py --smoke), whose baseline (b) failed its graph capture at world 8 in
# session 46: its failed rows now carry a one-line status (a08d2d1) and the table puts long cells under it as notes
# (common.print_table). Then the GPU tests that use the round checks' helpers (a16cf72: mixed_rounds.as_experts_saw):
# test_round_checks, test_fuzz and test_autograd at world 2, and at world 8 with what is left. Bounded by 560 s.
source tools/device_call.sh
left() { echo $((560 - (SECONDS - T0))); }
ONE_GPU_RANKS=8 bounded 200 bash tools/gpu_run.sh $L/hf8 build,hf_smoke > $L/hf8.log 2>&1
log "build and hf_smoke at world 8 rc=$?"
cp $L/hf8/summary.txt $OUT/hf8-summary.txt 2> /dev/null
grep -A 40 "^B/rank" $L/hf8/bench_hf_model_smoke.log > $OUT/hf8-table.txt 2> /dev/null
grep "graph decode" $L/hf8/bench_hf_model_smoke.log | sort | uniq -c | head -20 > $OUT/hf8-stderr-lines.txt
files="tests/python/gpu/test_round_checks.py tests/python/gpu/test_fuzz.py tests/python/gpu/test_autograd.py"
ONE_GPU_RANKS=2 GPU_TESTS="$files" bounded 180 bash tools/gpu_run.sh $L/t2 tests -rs > $L/t2.log 2>&1
log "round checks, fuzz, autograd at world 2 rc=$?"
cp $L/t2/summary.txt $OUT/t2-summary.txt 2> /dev/null
ONE_GPU_RANKS=8 GPU_TESTS="$files" bounded "$(left)" bash tools/gpu_run.sh $L/t8 tests -rs > $L/t8.log 2>&1
log "round checks, fuzz, autograd at world 8 rc=$?"
cp $L/t8/summary.txt $OUT/t8-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
