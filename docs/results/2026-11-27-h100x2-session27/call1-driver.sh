#!/usr/bin/env bash
# Ran as session 27's call 1 (written in session 26 as next-shrink-driver.sh), nvidia-h100-x2, 488 s.
# next-shrink.patch (in ../2026-11-27-h100x2-session26/) takes 30-38 KB out of every dispatch instance and 16-20 KB out of every combine
# instance, behaviour unchanged by construction: count_pairs' unrolled loop is one non-inlined copy (count_ids, its
# arguments plain values: a reference to the kernel's arguments made the call copy them to a 624-byte stack frame),
# and dispatch's send_group and combine's send_partials have one call site each (the early sends and the sends by
# turns were two inlined copies; next-shrink-loop-check.py shows the same order of work). bf16 dispatch 125.4 -> 87.6
# KB (121 -> 116 registers), combine 79.0 -> 58.6 (242 -> 210), no spills, compiled for both vendors, gfx942 assembly
# checked; never run on a GPU. Session 26 measured 0.04-0.07 us a KB of dispatch code (call 5), so this may be worth
# 1.5-2.5 us of every round if that rate holds.
# 1. the whole suite on the patch (hooks); 2. graph d+c A/B against main, the README shapes, counts drawn, two
# rounds, with a third tree, nw = the patch + next-shrink-nowide.patch (an experiment, not for main: the counting
# block never uses count_wide, whose 13.7 KB sit after the kernel's body and run only from 8192 ids: if nw gains at
# the small shapes, code that is never run costs even out of the way, and the cold paths should leave the kernel);
# 3. fp8 e4m3fn at three shapes and issue 35's pairs at DeepSeek-V3 128, one round each, in what time is left.
# If it wins: apply it, protocol.md "Code size" gets the numbers, CHANGELOG, README's table at the next fresh run.
# Setup (here): for t in base sh shh: mkdir -p .exp/$t && git archive HEAD | tar -x -C .exp/$t; then
# (cd .exp/sh && patch -p1 < ../../docs/results/2026-11-27-h100x2-session26/next-shrink.patch), the same in .exp/shh;
# cp -r .exp/sh .exp/nw; (cd .exp/nw && patch -p1 < ../../docs/results/2026-11-27-h100x2-session26/next-shrink-nowide.patch);
# rm -rf .exp/*/docs. carry [".exp/base", ".exp/sh", ".exp/shh", ".exp/nw"].
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/base .exp/sh .exp/shh:hooks .exp/nw >> $OUT/driver.log
log "built rc=$?"
bounded 330 bash -c "cd .exp/shh && bash tools/gpu_run.sh $L/suite tests > $L/suite.log 2>&1"
log "suite rc=$?"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2> /dev/null
export AB_BUILT=1 AB_ROUNDS=2
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_GRAPH_ARGS="--shapes $S --counts drawn" ab graph 170 .exp/base .exp/sh .exp/nw
export AB_ROUNDS=1
left=$((560 - (SECONDS - T0)))
[ $left -gt 60 ] && AB_GRAPH_ARGS="--shapes 64,6,2048,32;256,8,7168,128;256,8,7168,4096 --counts drawn --fp8 e4m3fn" \
  ab fp8 $((left / 2)) .exp/base .exp/sh
left=$((560 - (SECONDS - T0)))
[ $left -gt 40 ] && AB_GRAPH_ARGS="--shapes 256,8,7168,128 --counts issue35" ab unequal $left .exp/base .exp/sh
cd $OUT && tar czf all.tar.gz logs graph fp8 unequal 2> /dev/null; rm -rf logs graph fp8 unequal
log done
