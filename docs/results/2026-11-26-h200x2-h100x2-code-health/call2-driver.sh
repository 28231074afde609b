#!/usr/bin/env bash
# Call 2: graph A/B main vs candidate (+ send_partials split); bench_moe_layer and bench_graph eager with the
# old (align, then flush) and new (flush, then align) timing on the same build; the whole suite on the candidate.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o; mkdir -p $O/layer $O/eager
AB_GRAPH_ARGS='--counts max;drawn' timeout 200 bash tools/graph_ab.sh $O/ab .exp/main . > $O/ab.log 2>&1
log "ab rc=$?"; cp $O/ab/compare.md $OUT/compare.md
P=$PWD/python
for i in 1 2; do for v in old new; do s=$([ $v = old ] && echo .exp/main/benchmarks || echo benchmarks)
  PYTHONPATH=$P timeout 100 torchrun --nproc-per-node=2 $s/bench_moe_layer.py --tokens 128,2048 --iters 30 --out $O/layer/$v$i > $O/layer/$v$i.log 2>&1; log "layer $v$i rc=$?"
done; done
for v in old new; do s=$([ $v = old ] && echo .exp/main/benchmarks || echo benchmarks)
  PYTHONPATH=$P timeout 60 torchrun --nproc-per-node=2 $s/bench_graph.py --shapes "256,8,7168,128;256,8,7168,4096" --no-microbench --out $O/eager/$v > $O/eager/$v.log 2>&1; log "eager $v rc=$?"
done
timeout 290 bash tools/gpu_run.sh $O/suite build,tests > $O/suite_driver.log 2>&1; log "suite rc=$?"
cp $O/suite/summary.txt $OUT/suite_summary.txt
tar czf $OUT/o.tar.gz -C /tmp o
log done
