#!/usr/bin/env bash
# Session 38, call 2 (nvidia-h200-x2): where DeepSeek-V3's dispatch + combine spend their time at 128 tokens, the
# CUDA-graph steady state traced by the in-kernel profiler (main 4f57e58 built with MOE_A2A_PROFILE=1 in .exp/prof):
# one token and 128 tokens with each rank's count drawn as the challenge draws it, then 128 tokens every rank.
# carry [".exp/prof"].
source tools/device_call.sh
cd .exp/prof || exit 1
bounded 280 bash tools/trace_graph.sh $OUT/drawn "256,8,7168,1;256,8,7168,128" > $L/trace-drawn.log 2>&1
log "trace drawn rc=$?"
TRACE_BUILT=1 bounded 150 bash tools/trace_graph.sh $OUT/every "256,8,7168,128" --max-counts > $L/trace-every.log 2>&1
log "trace every rank rc=$?"
cd $OUT && for d in drawn every; do for f in $d/chain-*.txt; do cp $f $d-$(basename $f); done; done
tar cJf all.tar.xz logs drawn every 2> /dev/null; rm -rf logs drawn every
log done
