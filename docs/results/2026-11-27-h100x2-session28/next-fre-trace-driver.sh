#!/usr/bin/env bash
# Written in session 28; ran in session 29 as call 4, two shapes, traces only (../2026-11-27-h100x2-session29/call4-driver.sh). nvidia-h100-x2, about 230 s with the start.
# Why did flagged dispatch rows not gain at one token? Session 28's trace of main (call 4) at DeepSeek-V3 one token:
# the sending block's rows' release returns 2.2-2.3 us after its last send (2.4 -> 4.5-5.0 us), the group signal lands
# 1.0-1.1 us after that, and the receiving blocks, done with their segments by 3.2-3.5, wait for it until 5.7-6.1.
# Flagged rows (fre, session 27's next-flagged-rows-end.patch: rows, own rows included, as flagged words, no fence)
# should have cut up to 2 us there; call 1 measured 0.3-0.4 us slower at one token, 0.5 faster at 32 tokens and
# 0.8-1.8 slower from 64 tokens, where its path does not run. Profiler builds of main and fre, traces at one, 32 and
# 64 tokens (counts drawn), chains and lineups.
# Setup (here): for t in base fre: mkdir -p .exp/$t && git archive HEAD | tar -x -C .exp/$t; then
# (cd .exp/fre && patch -p1 < ../../docs/results/2026-11-27-h100x2-session27/next-flagged-rows-end.patch);
# rm -rf .exp/*/docs. carry [".exp/base", ".exp/fre"].
source tools/device_call.sh
for t in base fre; do
  bounded 150 bash -c "cd .exp/$t && MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=0 MAX_JOBS=16 python3 setup.py build_ext \
    --inplace --force > $L/build-profiler-$t.log 2>&1; echo profiler build $t rc=\$? >> $OUT/driver.log" &
done
wait
log "profiler builds done"
for t in base fre; do
  bounded 80 bash -c "cd .exp/$t && TRACE_BUILT=1 TRACE_TIMEOUT=75 bash tools/trace_graph.sh $OUT/trace-$t \
    '256,8,7168,1;256,8,7168,32;256,8,7168,64' > $L/trace-$t.log 2>&1"
  log "trace $t rc=$?"
done
cd $OUT && for t in base fre; do for f in trace-$t/chain-*.txt; do [ -f "$f" ] && cp "$f" "$t-$(basename "$f")"; done; done
tar czf all.tar.gz logs trace-base trace-fre 2> /dev/null; rm -rf logs trace-base trace-fre
log done
