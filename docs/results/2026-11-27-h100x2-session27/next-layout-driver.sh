#!/usr/bin/env bash
# NOT RUN (written in session 27 for the next one), nvidia-h100-x2, about 560 s with the start.
# Does the heap's layout cost time? Session 26's fr0 (session 25's flagged-rows code with its path off) lost 0.5-0.9 us
# at every shape, and session 26 read it as the cost of 12.8 KB of dispatch code; session 27 took 50 KB out of
# dispatch and combine and gained about nothing, so the other difference of fr0 is a suspect: its recv_flagged region
# (1.9 MB at DeepSeek-V3 and 128 tokens, world 2) moved every region after recv_count.
# pad = main + next-pad.patch: an unused region of recv_flagged's size and place, no code changed. If pad loses what
#       fr0 lost, the layout is what costs, and:
# hot = main + next-hot.patch: the small regions first (signals, counts, weight gradients, the rows' metadata), then
#       comb_flagged, recv_x, comb_x: every small region a round at a few tokens touches in the region's first pages
#       (the signals sit after comb_x on main). Host tests: RecvXSizeIsExact and NoInt32OverflowAtTheLargestConfig
#       fail on it (they pin main's offsets); the order and overlap checks pass with its order.
# 1. graph d+c A/B of base, pad, hot, the ten README shapes drawn, two rounds; 4096 bf16 one round;
# 2. the whole suite on main (hooks) with gpu_run.sh's steps bounded by tools/bounded.sh (first GPU run of it) and the
#    pool test's stacks on a hang.
# Setup (here): for t in base baseh pad hot: mkdir -p .exp/$t && git archive HEAD | tar -x -C .exp/$t; then
# (cd .exp/pad && patch -p1 < ../../docs/results/2026-11-27-h100x2-session27/next-pad.patch), the same for hot with
# next-hot.patch; rm -rf .exp/*/docs. carry [".exp/base", ".exp/baseh", ".exp/pad", ".exp/hot"].
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/base .exp/pad .exp/hot .exp/baseh:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1 AB_ROUNDS=2
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_GRAPH_ARGS="--shapes $S --counts drawn" ab graph 140 .exp/base .exp/pad .exp/hot
AB_ROUNDS=1 AB_GRAPH_ARGS="--shapes 256,8,7168,4096 --counts drawn" ab big 60 .exp/base .exp/pad .exp/hot
left=$((560 - (SECONDS - T0)))
bounded $left bash -c "cd .exp/baseh && bash tools/gpu_run.sh $L/suite tests > $L/suite.log 2>&1"
log "suite rc=$?"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2> /dev/null
cp $L/suite/failures-rank*.txt $OUT/ 2> /dev/null
cd $OUT && tar czf all.tar.gz logs graph big 2> /dev/null; rm -rf logs graph big
log done
