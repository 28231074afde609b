#!/usr/bin/env bash
# Call 4 of session 37: nvidia-h200-x2. .exp/fin = the final tree (the overlap's hooks as module functions instead of
# closures, after calls 1-3), built with the test hooks (the GPU tests need them). test_transformers.py on 2 GPUs (the overlap's GPU tests). carry [".exp/fin"].
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/fin:hooks >> $OUT/driver.log
log "built rc=$?"
(cd .exp/fin && PYTHONPATH=python bounded 200 torchrun --nproc-per-node=2 -m pytest tests/python/gpu/test_transformers.py \
  -q -p no:cacheprovider > $OUT/test_transformers.log 2>&1)
log "test_transformers rc=$? $(tail -1 $OUT/test_transformers.log)"
log done
