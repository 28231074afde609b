#!/usr/bin/env bash
# NOT RUN (written in session 23 for the next one), nvidia-h100-x2, about 170 s with the start: call 6 again on main
# with the counting block's new sub-stage (`dispatch.counts_out`: its count stores, barrier and release), at the two
# T=256 challenge shapes and at DeepSeek-V3 one token, counts drawn: does the counting block spend its 4-5 us counting,
# or waiting for its release behind the rows on the link? Nothing to carry: it builds main in place.
source tools/device_call.sh
bash tools/trace_graph.sh $OUT "128,8,4096,256;256,8,7168,256;256,8,7168,1" > $L/trace.log 2>&1
log "trace rc=$?"
cd $OUT && tar czf all.tar.gz logs trace && rm -rf logs trace
log done
