#!/usr/bin/env bash
# Call 1: graph and host A/B of main vs the candidate (op-aliasing + one-buffer-leg + place-rows-split + null-track),
# the receive-chain probe trace at DeepSeek-V3 T=1, bench_multinode on both.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o; mkdir -p $O/host $O/probe $O/mn
(cd .exp/probe && env MOE_A2A_PROFILE=1 MAX_JOBS=6 timeout 200 python3 setup.py build_ext --inplace --force > $O/probe/build.log 2>&1; echo "probe build rc=$?" >> $O/probe/build.log) &
AB_GRAPH_ARGS='--counts max;drawn' timeout 260 bash tools/graph_ab.sh $O/ab .exp/main . > $O/ab.log 2>&1
log "ab rc=$?"; cp $O/ab/compare.md $OUT/compare.md
for i in 1 2; do for t in .exp/main .; do n=$([ $t = . ] && echo cand || echo main)
  PYTHONPATH=$PWD/$t/python timeout 60 torchrun --nproc-per-node=2 benchmarks/bench_host.py --no-microbench --out $O/host/$n$i > $O/host/$n$i.log 2>&1; log "host $n$i rc=$?"
done; done
python3 benchmarks/compare_graph.py $O/host/main1/bench_host.json $O/host/cand1/bench_host.json $O/host/main2/bench_host.json $O/host/cand2/bench_host.json --names main1,cand1,main2,cand2 --out $OUT/compare_host.md > $O/host/compare.log 2>&1
wait; log "probe build: $(tail -1 $O/probe/build.log)"
PYTHONPATH=$PWD/.exp/probe/python timeout 90 torchrun --nproc-per-node=2 .exp/probe/benchmarks/bench_all2all.py --shapes "256,8,7168,1" --systems moe_a2a --no-microbench --no-graph --no-check --trace-graph 8 --trace $O/probe/trace.json --out $O/probe/bench > $O/probe/bench.log 2>&1
log "probe bench rc=$?"
for t in $O/probe/trace*.json; do
  PYTHONPATH=$PWD/.exp/probe/python python3 -m moe_a2a.trace chain $t > $t.chain.txt 2>&1
  PYTHONPATH=$PWD/.exp/probe/python python3 -m moe_a2a.trace timeline $t --waves > $t.timeline.txt 2>&1
  PYTHONPATH=$PWD/.exp/probe/python python3 -m moe_a2a.trace summary $t > $t.summary.txt 2>&1
done
log "traces done"
for t in .exp/main .; do n=$([ $t = . ] && echo cand || echo main)
  PYTHONPATH=$PWD/$t/python timeout 80 torchrun --nproc-per-node=2 $t/benchmarks/bench_multinode.py --out $O/mn/$n > $O/mn/$n.log 2>&1; log "multinode $n rc=$?"
done
tar czf $OUT/o.tar.gz -C /tmp o
log done
