#!/usr/bin/env bash
# Session 45's next-one-gpu-driver.sh, run as session 46's call 1 (one H200): for a session that has one GPU only. Two things not yet seen:
# README's corrected first line on the device image (session 45's call 4 found the bare `pip` another Python's; is
# /opt/torch/.venv writable to an editable install?), and the GPU suite at world 8, the MI300X node's world (it has
# run whole at worlds 2, 3 and 4, and in part at 5-7): here the files of the rounds' protocol, half the suite, eight
# ranks time-sliced (correctness only), bounded by what is left of 560 s. The other half is next-one-gpu-driver2.sh's.
source tools/device_call.sh
left() { echo $((560 - (SECONDS - T0))); }
bounded 240 python3 -m pip install --no-build-isolation -e . > $L/pip.log 2>&1
log "python3 -m pip install rc=$?"
tail -3 $L/pip.log > $OUT/pip-tail.txt
python3 -c "import moe_a2a._C, moe_a2a; print('imports', moe_a2a.__file__)" >> $OUT/pip-tail.txt 2>&1
log "import rc=$?"
ONE_GPU_RANKS=8 GPU_TESTS="tests/python/gpu/test_all_to_all.py tests/python/gpu/test_fp8.py tests/python/gpu/test_round_order.py tests/python/gpu/test_heap.py" \
  bounded "$(left)" bash tools/gpu_run.sh $L/w8a build,tests -rs > $L/w8a.log 2>&1
log "suite half a at world 8 rc=$?"
cp $L/w8a/summary.txt $OUT/w8a-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
