#!/usr/bin/env bash
# Session 39, call 4 (nvidia-h200-x2): own rows in the drain in the small instance (kOwnRows false) as in call 3, but
# the drain inlined (call 3's non-inlined function cost 6 us at every shape), from kOwnInDrainBytes, against main
# cea285a: is the loss at unequal counts in call 2 the lever's or the larger instance's? No suite (call 3 ran it on
# the same source). carry [".exp/main", ".exp/drain"].
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/main .exp/drain >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes $S --counts drawn" ab drawn 100 .exp/main .exp/drain
E="256,8,7168,128;256,8,7168,256;256,8,7168,384;128,8,4096,256"
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes $E" ab every 80 .exp/main .exp/drain
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes 256,8,7168,256 --counts 256/64;128/16;200/100;256/128" \
  ab pairs 80 .exp/main .exp/drain
cd $OUT && tar cJf all.tar.xz logs drawn every pairs 2> /dev/null; rm -rf logs drawn every pairs
log done
