#!/usr/bin/env bash
# Call 1 (session 6): overlap.cu mode 3 (a fence per wave) vs mode 2 (per block); main and wip/bwd-arrival built
# side by side; the whole suite on wip/bwd-arrival with per-test durations; bench_moe_layer on both, alternated.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o1; mkdir -p $O/layer $O/overlap
nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/driver.log
(MAX_JOBS=8 timeout 200 bash tools/gpu_run.sh $O/main_build build > $O/main_build_driver.log 2>&1; echo "main build rc=$?" >> $O/main_build_driver.log) &
(cd .exp/bwd && MAX_JOBS=8 timeout 200 bash tools/gpu_run.sh $O/bwd_build build > $O/bwd_build_driver.log 2>&1; echo "bwd build rc=$?" >> $O/bwd_build_driver.log) &
nvcc -O3 -arch=sm_90 -o $O/overlap/overlap .exp/overlap/overlap.cu > $O/overlap/build.log 2>&1; log "overlap build rc=$?"
for T in 4096 1024; do timeout 60 $O/overlap/overlap $T > $O/overlap/T$T.txt 2>&1; log "overlap T=$T rc=$?"; done
wait; log "$(tail -1 $O/main_build_driver.log) / $(tail -1 $O/bwd_build_driver.log)"
p=29631
for rep in 1 2; do for t in .exp/bwd .; do n=$( [ $t = . ] && echo main || echo bwd )
  (cd $t && PYTHONPATH=$PWD/python timeout 60 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_moe_layer.py --tokens 128,2048 --iters 30 \
    --phases dispatch,combine,dispatch-bwd,combine-bwd,combine-bwd-y --out $O/layer/$n$rep > $O/layer/$n$rep.log 2>&1); log "layer $n$rep rc=$?"; p=$((p+1))
  pkill -f torchrun
done; done
left=$((570 - (SECONDS - T0)))
(cd .exp/bwd && timeout $left setsid bash tools/gpu_run.sh $O/suite tests --durations=40 > $O/suite_driver.log 2>&1); log "suite rc=$?"
pkill -f torchrun; pkill -f pytest
cp $O/suite/summary.txt $OUT/suite_summary.txt 2>/dev/null
tar czf $OUT/o.tar.gz -C /tmp o1
log done
