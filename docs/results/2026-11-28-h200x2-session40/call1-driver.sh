#!/usr/bin/env bash
# Session 40, call 1 (nvidia-h200-x2): issue 40, the backward of combine's read of y at 256-512 tokens. Trees (each
# HEAD 30df1b9 without docs/, patched; patches beside this driver):
#   .exp/main  main;
#   .exp/pf    call1-pf.patch: the peers' rows of y (only they: the own rows are answered while the link drains),
#              one bulk prefetch a (slot, k) of the block's first answer group, where the peers' share of y fits
#              3/5 of L2 (was: all of y, where it fits 1/3: 128 tokens of DeepSeek-V3; now to 512);
#   .exp/pfcs  call1-pfcs.patch: pf, and y read and grad y written evict-first (ld.cs, st.cs) so that the own rows'
#              streams do not push the prefetched rows out of L2;
#   .exp/cs    call1-cs.patch: main with only the evict-first loads and stores.
# bench_moe_layer (AB_BENCH=layer), every rank 128 / 256 / 512 / 2048, then counts drawn at 256 / 512, two rounds.
# carry [".exp/main", ".exp/pf", ".exp/pfcs", ".exp/cs"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/main .exp/pf .exp/pfcs .exp/cs >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 128,256,512,2048 --phases dispatch,combine-bwd,combine-bwd-y" \
  ab every 240 .exp/main .exp/pf .exp/pfcs .exp/cs
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 256,512 --counts drawn --phases dispatch,combine-bwd" \
  ab drawn 150 .exp/main .exp/pf .exp/pfcs .exp/cs
cd $OUT && tar cJf all.tar.xz logs every drawn 2> /dev/null; rm -rf logs every drawn
log done
