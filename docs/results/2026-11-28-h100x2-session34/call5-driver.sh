#!/usr/bin/env bash
# Session 34, call 5: nvidia-h100-x2, about 170 s with the start. Call 4's whole suite failed one test in its two
# layouts, test_no_op_output_aliases_an_input_or_another_output: it checks every op of the library, and grouped_gemv
# was new and unchecked. Now it checks grouped_gemv too: that test, and test_grouped_gemv.py, on the tree that lands.
# Setup (here): .exp/hooks = the working tree (git ls-files -co | tar), docs left out. carry [".exp/hooks"].
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/hooks:hooks >> $OUT/driver.log
log "built rc=$?"
(cd .exp/hooks && PYTHONPATH=$PWD/python bounded 90 torchrun --nproc-per-node=2 -m pytest -q \
  "tests/python/gpu/test_all_to_all.py::test_no_op_output_aliases_an_input_or_another_output" \
  tests/python/gpu/test_grouped_gemv.py) > $L/tests.log 2>&1
log "tests rc=$? $(grep -E '(passed|failed)' $L/tests.log | tail -n 1)"
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
