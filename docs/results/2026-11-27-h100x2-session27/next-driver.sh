#!/usr/bin/env bash
# Run in session 28 as its call 1 (../2026-11-27-h100x2-session28/), nvidia-h100-x2, about 570 s with the start.
# Does the heap's layout cost time, and do flagged dispatch rows gain once it cannot? Session 26's fr0 (session 25's
# flagged-rows code with its path off) lost 0.5-0.9 us at every shape, read then as the price of 12.8 KB of dispatch
# code; session 27 took 50 KB out of dispatch and combine and gained about nothing, so fr0's other difference is a
# suspect: its recv_flagged region (1.9 MB at DeepSeek-V3 and 128 tokens, world 2) moved every region after
# recv_count. And fr's failing test was a race in the test, not the protocol (README, "fr's test failure").
# pad = main + next-pad.patch: an unused region of recv_flagged's size and place, no code changed.
# hot = main + next-hot.patch: the small regions first (signals, counts, weight gradients, the rows' metadata), then
#       comb_flagged, recv_x, comb_x. Host tests: RecvXSizeIsExact and NoInt32OverflowAtTheLargestConfig fail on it
#       (they pin main's offsets); the order and overlap checks pass with its order.
# fre = main + next-flagged-rows-end.patch: session 25's flagged dispatch rows (a source with at most 32 tokens), ported
#       to the split dispatch files (sm_90 SASS the same as session 25's patch), recv_flagged last in the region (no
#       other region moves), and its test's race fixed (every rank looks before the next round). Host tests pass.
# 1. fre's flagged tests (hooks build); 2. graph d+c A/B of base, pad, hot, fre: the ten README shapes drawn, two
# rounds; 4096 bf16 one round; 3. the whole suite on main (hooks): the first GPU run of gpu_run.sh's steps under
# tools/bounded.sh and of the pool test's stack dump.
# Setup (here): for t in base baseh pad hot fre freh: mkdir -p .exp/$t && git archive HEAD | tar -x -C .exp/$t; then
# (cd .exp/pad && patch -p1 < ../../docs/results/2026-11-27-h100x2-session27/next-pad.patch), the same for hot
# (next-hot.patch) and for fre and freh (next-flagged-rows-end.patch); rm -rf .exp/*/docs.
# carry [".exp/base", ".exp/baseh", ".exp/pad", ".exp/hot", ".exp/fre", ".exp/freh"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/base .exp/pad .exp/hot .exp/fre .exp/freh:hooks .exp/baseh:hooks \
  >> $OUT/driver.log
log "built rc=$?"
GPU_TESTS=tests/python/gpu/test_all_to_all.py bounded 100 bash -c \
  "cd .exp/freh && bash tools/gpu_run.sh $L/fre-tests tests -k 'flagged or count_words' > $L/fre-tests.log 2>&1"
log "fre tests rc=$?"
cp $L/fre-tests/summary.txt $OUT/fre-tests-summary.txt 2> /dev/null
export AB_BUILT=1 AB_ROUNDS=2
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_GRAPH_ARGS="--shapes $S --counts drawn" ab graph 170 .exp/base .exp/pad .exp/hot .exp/fre
AB_ROUNDS=1 AB_GRAPH_ARGS="--shapes 256,8,7168,4096 --counts drawn" ab big 60 .exp/base .exp/pad .exp/hot .exp/fre
left=$((565 - (SECONDS - T0)))
bounded $left bash -c "cd .exp/baseh && bash tools/gpu_run.sh $L/suite tests > $L/suite.log 2>&1"
log "suite rc=$?"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2> /dev/null
cp $L/suite/failures-rank*.txt $OUT/ 2> /dev/null
cd $OUT && tar czf all.tar.gz logs graph big 2> /dev/null; rm -rf logs graph big
log done
