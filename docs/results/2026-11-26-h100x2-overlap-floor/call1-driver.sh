#!/usr/bin/env bash
# Call 1: link/HBM overlap microbenchmark (one process, both GPUs); the whole suite on the candidate
# (main + wip/init-split + wip/record-gather); bench_multinode on main and on the candidate.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o1; mkdir -p $O/mn $O/overlap
nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/driver.log
(cd .exp/main && MAX_JOBS=6 timeout 200 python3 setup.py build_ext --inplace > $O/main_build.log 2>&1; echo "main build rc=$?" >> $O/main_build.log) &
nvcc -O3 -arch=sm_90 -o $O/overlap/overlap .exp/overlap/overlap.cu > $O/overlap/build.log 2>&1; log "overlap build rc=$?"
for T in 4096 1024; do timeout 60 $O/overlap/overlap $T > $O/overlap/T$T.txt 2>&1; log "overlap T=$T rc=$?"; done
cp $O/overlap/T4096.txt $OUT/overlap-T4096.txt
timeout 330 setsid bash tools/gpu_run.sh $O/suite build,tests > $O/suite_driver.log 2>&1; log "suite rc=$?"
pkill -f torchrun; pkill -f pytest
cp $O/suite/summary.txt $OUT/suite_summary.txt
wait; log "$(tail -1 $O/main_build.log)"
p=29621
for t in .exp/main .; do n=$( [ $t = . ] && echo cand || echo main )
  PYTHONPATH=$PWD/$t/python timeout 80 torchrun --master-port=$p --nproc-per-node=2 $t/benchmarks/bench_multinode.py --out $O/mn/$n > $O/mn/$n.log 2>&1; log "multinode $n rc=$?"; p=$((p+1))
done
tar czf $OUT/o.tar.gz -C /tmp o1
log done
