#!/usr/bin/env bash
# Session 49's call 4 (one H200; ranks time-sliced: correctness only), what is left of the device time, on 16566b1:
# python/moe_a2a/all_to_all.py split into _rounds.py (the torch ops, autograd) and _arguments.py (the argument
# checks, the config), and ep_device.cuh split into three headers (machine code byte-identical, tools/machine_code.sh).
# The build (the extension from the new headers), then at world 2 the files that go through the moved code most
# directly: test_round_order.py, the torch.compile, CUDA-graph, aliasing and split-call tests of test_all_to_all.py,
# then test_autograd.py, bounded by 225 s.
source tools/device_call.sh
left() { echo $((225 - (SECONDS - T0))); }
bounded 90 bash tools/gpu_run.sh $L/build build > $L/build.log 2>&1
log "build rc=$?"
ONE_GPU_RANKS=2 GPU_TESTS="tests/python/gpu/test_round_order.py tests/python/gpu/test_all_to_all.py" \
  bounded "$(left)" bash tools/gpu_run.sh $L/ops tests -k "round_order or torch_compile or cuda_graph or alias or split_calls or thousand" \
  > $L/ops.log 2>&1
log "round order, compile, graph, aliasing, split calls at world 2 rc=$?"
grep -h -- "-- gpu_tests" $L/ops/summary.txt >> $OUT/summary.txt 2> /dev/null
ONE_GPU_RANKS=2 GPU_TESTS="tests/python/gpu/test_autograd.py" bounded "$(left)" bash tools/gpu_run.sh $L/autograd tests \
  > $L/autograd.log 2>&1
log "test_autograd at world 2 rc=$?"
grep -h -- "-- gpu_tests" $L/autograd/summary.txt >> $OUT/summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
