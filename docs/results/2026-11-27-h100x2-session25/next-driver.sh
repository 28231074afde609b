#!/usr/bin/env bash
# NOT RUN (written in session 25 for the next one), nvidia-h100-x2, about 270 s with the start.
# Where the kept tree (03d0864: flagged counts, whole batches) loses 0.3-0.5 us at DeepSeek-V3 128 tokens and
# E128-K4-H2880-T128 (drawn): profiler builds of main before it (1cd6b5a) and of it, a graph-steady-state trace of
# each at both shapes, counts drawn, with lineups (read them side by side: python3 -m moe_a2a.trace lineup).
# Setup (here): mkdir -p .exp/base .exp/new; git archive 1cd6b5a | tar -x -C .exp/base; git archive 03d0864 | tar -x
# -C .exp/new; rm -rf .exp/base/docs .exp/new/docs. carry [".exp/base", ".exp/new"].
source tools/device_call.sh
for t in base new; do
  (cd .exp/$t && MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=0 MAX_JOBS=8 timeout 250 python3 setup.py build_ext --inplace \
    --force > $L/build-profiler-$t.log 2>&1; echo "profiler build $t rc=$?" >> $OUT/driver.log) &
done
wait
log "profiler builds done"
for t in base new; do
  (cd .exp/$t && TRACE_BUILT=1 TRACE_TIMEOUT=150 bash tools/trace_graph.sh $OUT/trace-$t "256,8,7168,128;128,4,2880,128" > $L/trace-$t.log 2>&1)
  log "trace $t rc=$?"
done
cd $OUT && tar czf all.tar.gz logs trace-base trace-new && rm -rf logs
for t in base new; do cp trace-$t/chain-*E256*T128*.txt chain-$t-T128.txt 2> /dev/null; done
rm -rf trace-base trace-new
log done
