#!/usr/bin/env bash
# For the next session (not run): nvidia-h100-x2, about 450 s with the start.
# Counts first (next-counts-first.patch, compile-checked for NVIDIA and gfx942 only): where every block runs both
# halves (the mid shapes, about 64 to 511 tokens at world 2), the sending blocks issue no metadata or row before the
# counting block has issued its count stores (a workspace word, counts_issued), and each block announces its first
# group only after its count wait and segments. Call 1's traces: on the rank with more tokens the counts crossed the
# link behind the rows and landed at the drain's end, and each block looked for them, laid out its segments, looked
# for its rows, placed and copied them only after its own release returned (about 6 us after the drain, profiled).
# Counts first should land them before the drain, so that the count look and the segments run under the release's
# wait. Earlier tries of each half alone lost (protocol.md: announce after the segments lost where the counts came
# after the acknowledgements; counts before the announcement waited 4-5 us for counts behind the rows).
# 1. graph A/B, README's ten shapes drawn, then every rank at T (the ab set), two rounds each.
# 2. cfh (hooks): test_all_to_all.py, test_round_order.py, test_faults.py.
# 3. pr = main + next-plain-reserved.patch (the reservation also where plain rows are placed by their senders, world
#    2, 512-1023 tokens; that instance then carries both ways, about 138 KB): DeepSeek-V3 512 and 768 tokens, every rank
#    and drawn, and 1000/520, two rounds (session 30 call 3 saw 91.3 / 91.6 -> 90.4 at 512 with the smaller instance).
# Setup (here): for t in base cf cfh: mkdir -p .exp/$t && git archive HEAD | tar -x -C .exp/$t; (cd .exp/cf && patch -p1
# < ../../docs/results/2026-11-27-h100x2-session30/next-counts-first.patch), same for cfh; .exp/pr the same with
# next-plain-reserved.patch; rm -rf .exp/*/docs. carry [".exp/base", ".exp/cf", ".exp/cfh", ".exp/pr"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/base .exp/cf .exp/cfh:hooks .exp/pr >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes $S --counts drawn" ab drawn 150 .exp/base .exp/cf
AB_ROUNDS=2 ab every 120 .exp/base .exp/cf
GPU_TESTS="tests/python/gpu/test_all_to_all.py tests/python/gpu/test_round_order.py tests/python/gpu/test_faults.py" \
  bounded 180 bash -c "cd .exp/cfh && bash tools/gpu_run.sh $L/cf-tests tests > $L/cf-tests.log 2>&1"
log "cf tests rc=$?"
cp $L/cf-tests/summary.txt $OUT/cf-tests-summary.txt 2> /dev/null
left=$((585 - (SECONDS - T0)))
[ $left -gt 60 ] && AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes 256,8,7168,1023 --counts 512/512;768/768;1000/520;drawn" \
  ab plain $left .exp/base .exp/pr
cd $OUT && tar czf all.tar.gz logs drawn every plain 2> /dev/null; rm -rf logs drawn every plain
log done
