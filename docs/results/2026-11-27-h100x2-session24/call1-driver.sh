#!/usr/bin/env bash
# Call 1 (nvidia-h100-x2, nothing to carry): the whole GPU suite on main (9b59f43: its new test of a peer's weight
# gradients and the UNUSED_SLOT_BIT binding had not run on a GPU), then session 23's next driver: the profiler build
# and graph-replayed traces with the counting block's new sub-stage (dispatch.counts_out) at the two T=256 challenge
# shapes and DeepSeek-V3 one token, counts drawn (also the first GPU run of tools/trace_graph.sh).
source tools/device_call.sh
bash tools/gpu_run.sh $L/suite build,tests > $L/suite.log 2>&1
log "suite rc=$?"
bash tools/trace_graph.sh $OUT "128,8,4096,256;256,8,7168,256;256,8,7168,1" > $L/trace.log 2>&1
log "trace rc=$?"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2>/dev/null
cd $OUT && tar czf all.tar.gz logs trace && rm -rf logs trace
log done
