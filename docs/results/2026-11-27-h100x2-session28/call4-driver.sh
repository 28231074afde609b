#!/usr/bin/env bash
# Session 28, call 4, nvidia-h100-x2 (the budget's last 300 s): where main's (d0d88fb, kernels of 4391143) time goes
# at the smallest shapes now that counts are flagged words and whole batches are placed at once (session 25's traces
# at one token are of the trees before both): one profiler build, graph-steady-state traces of DeepSeek-V3 at one
# token a rank and E8-K2-H6144-T16 drawn, chains and lineups. Nothing to carry: it builds the checkout in place.
source tools/device_call.sh
bounded 100 bash -c "MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=0 MAX_JOBS=16 python3 setup.py build_ext --inplace --force \
  > $L/build-profiler.log 2>&1"
log "profiler build rc=$?"
bounded 85 bash -c "TRACE_BUILT=1 TRACE_TIMEOUT=80 bash tools/trace_graph.sh $OUT/trace '256,8,7168,1;8,2,6144,16' \
  > $L/trace.log 2>&1"
log "trace rc=$?"
cd $OUT && for f in trace/chain-*.txt; do [ -f "$f" ] && cp "$f" "$(basename "$f")"; done
tar czf all.tar.gz logs trace && rm -rf logs trace
log done
