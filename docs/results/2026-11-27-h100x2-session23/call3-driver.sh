#!/usr/bin/env bash
# Session 23, call 3, nvidia-h100-x2: the final tree (acquire-first looks in await_some_signals, the one bounded spin
# spin_bounded under every other wait, a flagged word's timeout named "a peer's" with the round's epoch; no peek)
# against main (7546fce): graph A/B, two rounds, call 1's shapes drawn, then DeepSeek-V3 at 1024 and 4096 tokens every
# rank (one round: base, final, base again); the layer's dispatch and backward of combine at 128 tokens every rank and drawn. Then the whole GPU suite on
# the final tree (with the new test of a pair no expert answers).
# Setup: .exp/base = git archive 7546fce; .exp/final = the working tree; each without docs/.
# carry [".exp/base", ".exp/final"]. "." (the working tree, with hooks) runs the suite.
source tools/device_call.sh
BUILD_TIMEOUT=250 bash tools/build_trees.sh $L .exp/base .exp/final .:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1 AB_ROUNDS=2
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_GRAPH_ARGS="--shapes $S --counts drawn" ab graph 100 .exp/base .exp/final
AB_ROUNDS=1 AB_GRAPH_ARGS="--shapes 256,8,7168,1024;256,8,7168,4096" ab large 90 .exp/base .exp/final
AB_BENCH=layer AB_LAYER_ARGS="--tokens 128 --counts max;drawn --phases dispatch,combine-bwd" ab layer 75 .exp/base .exp/final
timeout 270 bash tools/gpu_run.sh $OUT/suite tests > $L/suite-driver.log 2>&1
log "suite rc=$?"; cp $OUT/suite/summary.txt $OUT/suite-summary.txt
cd $OUT && tar czf all.tar.gz logs graph large layer suite && rm -rf logs graph large layer suite
log done
