#!/usr/bin/env bash
# NOT RUN (written in session 24 for the next one), nvidia-h100-x2, about 180 s with the start; nothing to carry (it
# builds main in place). Session 24 kept the count before the rows' first chunks (graph d+c 40.5 -> 40.0 at
# E256-K8-H7168-T256 drawn): this traces main at the T=256 shapes and DeepSeek-V3 one token, counts drawn, and writes
# each kernel's lineup (python3 -m moe_a2a.trace lineup: the ranks on one clock, run by run) beside the chains. What to
# read there: the routing (2-3.5 us per block before; block 0 1.1), and on the heavy rank of each run the 0.4-0.8 us
# gaps between segments and wait_rows and between batch and place (no stage recorded: cold code or the divisions of
# the receive items' set-up?), which every receiving block pays after its sends.
source tools/device_call.sh
bash tools/trace_graph.sh $OUT "128,8,4096,256;256,8,7168,256;256,8,7168,1" > $L/trace.log 2>&1
log "trace rc=$?"
cp $OUT/trace/lineup-dispatch-trace-E256-K8-H7168-T256-graph8.txt $OUT/ 2> /dev/null
cd $OUT && tar czf all.tar.gz logs trace && rm -rf logs trace
log done
