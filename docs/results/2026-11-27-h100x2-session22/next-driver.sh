#!/usr/bin/env bash
# NOT RUN (written in session 22 for the next one), nvidia-h100-x2, about 420 s with the start: main as it stands
# (prefetch_y included) in one run, for README's training table: the whole GPU suite, then the `layer` step
# (examples/moe_layer.py and bench_moe_layer.py: every phase at 128 / 512 / 2048 tokens, with the floor), then
# bench_moe_layer with counts drawn and 0/T. Nothing to set up or carry: it builds main in place.
source tools/device_call.sh
timeout 330 bash tools/gpu_run.sh $OUT/run build,tests,layer > $L/run-driver.log 2>&1
log "suite and layer rc=$?"; cp $OUT/run/summary.txt $OUT/summary.txt
PYTHONPATH=$PWD/python timeout 150 torchrun --nproc-per-node=2 benchmarks/bench_moe_layer.py --tokens 128,512,2048 \
  --counts "drawn;0/128" --out $OUT/unequal > $L/unequal.log 2>&1
log "unequal rc=$?"
cd $OUT && tar czf all.tar.gz logs run unequal && rm -rf logs run unequal
log done
