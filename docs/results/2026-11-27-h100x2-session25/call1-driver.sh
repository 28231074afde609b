#!/usr/bin/env bash
# Session 25, call 1 (nvidia-h100-x2). Trees (carried): .exp/base = main 1cd6b5a; .exp/fc = flagged counts (the
# working tree: every count a flagged word, no count signal, no fence); .exp/seg = main + session 24's
# next-segments-before-announce.patch.
# 1. graph d+c A/B of the three, the README shapes, counts drawn, two rounds.
# 2. Profiler builds of base and fc, then a graph-steady-state trace of each at DeepSeek-V3 one token and
#    E128-K8-H4096-T256 drawn, with lineups: why flagged counts lost 0.7 us at one token in session 14.
source tools/device_call.sh
BUILD_TIMEOUT=250 bash tools/build_trees.sh $L .exp/base .exp/fc .exp/seg >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1 AB_ROUNDS=2
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_GRAPH_ARGS="--shapes $S --counts drawn" ab graph 200 .exp/base .exp/fc .exp/seg
for t in base fc; do
  (cd .exp/$t && MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=0 MAX_JOBS=8 timeout 250 python3 setup.py build_ext --inplace --force \
    > $L/build-profiler-$t.log 2>&1; echo "profiler build $t rc=$?" >> $OUT/driver.log) &
done
wait
log "profiler builds done"
for t in base fc; do
  (cd .exp/$t && TRACE_BUILT=1 TRACE_TIMEOUT=150 bash tools/trace_graph.sh $OUT/trace-$t "256,8,7168,1;128,8,4096,256" > $L/trace-$t.log 2>&1)
  log "trace $t rc=$?"
done
cd $OUT && tar czf all.tar.gz logs graph trace-base trace-fc && rm -rf logs graph
for t in base fc; do cp trace-$t/chain-*E256*T1*.txt chain-$t-T1.txt 2>/dev/null; done
rm -rf trace-base trace-fc
log done
