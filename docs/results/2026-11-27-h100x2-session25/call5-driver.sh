#!/usr/bin/env bash
# Session 25, call 5 (nvidia-h100-x2), the budget's last 280 s. Trees (carried): .exp/base = main 1cd6b5a; .exp/new
# = call 3's (flagged counts, one merged look at every count word a thread, and whole batches); .exp/tp = new with
# the counts awaited in two phases (a thread a source polls the token words, stored after a barrier behind the
# counts, then every thread loads its count words): does the polling of every count word by every block cost the
# 128-token shapes (call 4: 1/128 29.7 -> 30.2 us, drawn 30.6-30.7 -> 31.0)?
source tools/device_call.sh
BUILD_TIMEOUT=150 bash tools/build_trees.sh $L .exp/base .exp/new .exp/tp >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1 AB_ROUNDS=1
AB_GRAPH_ARGS="--shapes 256,8,7168,128;128,4,2880,128 --counts 1/128;drawn;1/1" ab mid 80 .exp/base .exp/new .exp/tp
AB_GRAPH_ARGS="--shapes 8,2,6144,16;64,6,2048,32;256,8,7168,16 --counts drawn" ab small 60 .exp/base .exp/new .exp/tp
cd $OUT && tar czf all.tar.gz logs mid small && rm -rf logs mid small
log done
