#!/usr/bin/env bash
# Call 4 (nvidia-h100-x2): session 25's next-driver.sh, bounded. Where HEAD (807a210: flagged counts and whole batches
# of 03d0864, plus a refactor of the same values) loses 0.3-0.5 us at DeepSeek-V3 128 tokens and E128-K4-H2880-T128
# (drawn) against 1cd6b5a before them, and where the 30.7 us of the 128-token round go at all (issue 35's target is
# 26): profiler builds of both, a graph-steady-state trace of each at DeepSeek-V3 128 tokens only (the budget left), counts drawn, chains and lineups.
# Setup (here): git archive 1cd6b5a into .exp/pre, HEAD into .exp/new, rm -rf their docs.
source tools/device_call.sh
for t in pre new; do
  bounded 150 bash -c "cd .exp/$t && MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=0 MAX_JOBS=16 python3 setup.py build_ext \
    --inplace --force > $L/build-profiler-$t.log 2>&1; echo profiler build $t rc=\$? >> $OUT/driver.log" &
done
wait
log "profiler builds done"
for t in pre new; do
  bounded 110 bash -c "cd .exp/$t && TRACE_BUILT=1 TRACE_TIMEOUT=100 bash tools/trace_graph.sh $OUT/trace-$t '256,8,7168,128' > $L/trace-$t.log 2>&1"
  log "trace $t rc=$?"
done
cd $OUT && for t in pre new; do for f in trace-$t/chain-*.txt; do [ -f "$f" ] && cp "$f" "$t-$(basename "$f")"; done; done
tar czf all.tar.gz logs trace-pre trace-new && rm -rf logs trace-pre trace-new
log done
