#!/usr/bin/env bash
# Session 29, call 4, nvidia-h100-x2, about 250 s with the start (session 28's next-fre-trace-driver.sh, two shapes).
# Why did flagged dispatch rows not gain at one token? Session 28's trace of main (call 4) at DeepSeek-V3 one token:
# the sending block's rows' release returns 2.2-2.3 us after its last send, the group signal lands 1.0-1.1 us after
# that, and the receiving blocks, done with their segments by 3.2-3.5, wait for it until 5.7-6.1. Flagged rows (fre,
# session 27's next-flagged-rows-end.patch: rows, own rows included, as flagged words, no fence) should have cut up
# to 2 us there; session 28 measured 0.3-0.4 us slower at one token and 0.8-1.8 slower from 64 tokens, where its path
# does not run. Profiler builds of main (this session's, with the start signal relaxed) and fre, traces at one and 64 tokens
# (counts drawn).
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
# Only the traces here (chains, lineups and late blocks are made on the CPU machine afterwards: python3 -m
# moe_a2a.trace on each trace, as tools/trace_graph.sh would: in call 1 its analysis of the first trace had not
# finished when the bound ran out; here it takes about 30 s a trace).
for t in base fre; do
  mkdir -p $OUT/trace-$t; left=$((250 - (SECONDS - T0)))
  [ $left -gt 30 ] || break
  PYTHONPATH=$PWD/.exp/$t/python bounded $(( left < 90 ? left : 90 )) torchrun --nproc-per-node=2 \
    benchmarks/bench_all2all.py --shapes '256,8,7168,1;256,8,7168,64' --no-graph --no-check --trace-graph 8 \
    --systems moe_a2a --no-microbench --trace $OUT/trace-$t/trace > $L/trace-$t.log 2>&1
  log "trace $t rc=$?"
done
cd $OUT && tar czf all.tar.gz logs trace-base trace-fre 2> /dev/null; rm -rf logs trace-base trace-fre
log done
