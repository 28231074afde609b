#!/usr/bin/env bash
# Session 40, call 3 (nvidia-h200-x2): issue 40 at 128 and 256 tokens. main asks L2 for all of y where it fits a third
# of L2 (prefetch_y: 128 tokens of DeepSeek-V3 at world 2), after the block's sends; session 22 found no gain with
# every rank at 128 (HBM busy with the own rows' answers while the link drains). call3-pfb.patch asks for the peers'
# rows only (half the bytes at world 2), where they fit a third of L2 (so also at 256), at main's place (after the
# sends), one 14 KB piece a (slot, k) from the route's positions. Call 1's `pf` asked at the kernel's start and lost
# 2-3 us: there the block's barrier after its sends waited for the prefetching wave's route loads.
# bench_moe_layer, every rank 128 / 256 / 512 and drawn 128 / 256, two rounds. carry [".exp/main", ".exp/pfb"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/main .exp/pfb >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 128,256,512 --phases dispatch,combine-bwd,combine-bwd-y" \
  ab every 120 .exp/main .exp/pfb
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 128,256 --counts drawn;0/128 --phases dispatch,combine-bwd" \
  ab drawn 100 .exp/main .exp/pfb
cd $OUT && tar cJf all.tar.xz logs every drawn 2> /dev/null; rm -rf logs every drawn
log done
