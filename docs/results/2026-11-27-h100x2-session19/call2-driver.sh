#!/usr/bin/env bash
# Session 19, call 2 (nvidia-h100-x4): three A/Bs at world 4 on one build of four trees (built here as
# tools/graph_ab.sh builds them, then every graph_ab with AB_BUILT=1), each alternated in one call, two rounds:
# - HEAD's backward of combine (answers as tasks, session 18) against 4f7ddb9's (cb0): the MoE layer's rounds;
# - w4 (own rows placed by their senders at world 4 too, kOwnPlacedCopyWorld = 4) against HEAD: DeepSeek-V3 at
#   512 / 768 tokens every rank, 600/300 alternating, counts drawn in 1..1024, graph d+c;
# - fw (flagged partial sums up to 64 / world tokens: 16 at world 4) against HEAD: the challenge shapes and
#   DeepSeek-V3 at 1 / 16 / 32 tokens, counts drawn, graph d+c.
# Trees: .exp/w4 and .exp/fw are HEAD with one line changed (include/moe_a2a/ep/config.h), .exp/cb0 = 4f7ddb9.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
for t in . .exp/cb0 .exp/w4 .exp/fw; do
  (cd $t && env MOE_A2A_PROFILE=0 MAX_JOBS=16 timeout 240 python3 setup.py build_ext --inplace --force \
    > $OUT/build-$(basename $t).log 2>&1; echo "build $t rc=$?" >> $OUT/driver.log) &
done
wait
log "built"
export AB_BUILT=1 AB_ROUNDS=2
AB_BENCH=layer AB_LAYER_ARGS="--phases dispatch,combine-bwd,combine-bwd-y" \
  timeout 200 bash tools/graph_ab.sh $OUT/ab-layer .exp/cb0 . > $OUT/ab-layer.log 2>&1
log "layer graph_ab rc=$?"
AB_GRAPH_ARGS="--shapes 256,8,7168,1024 --counts 512/512/512/512;768/768/768/768;600/300/600/300;drawn" \
  timeout 150 bash tools/graph_ab.sh $OUT/ab-w4 . .exp/w4 > $OUT/ab-w4.log 2>&1
log "w4 graph_ab rc=$?"
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32"
AB_GRAPH_ARGS="--shapes $S --counts drawn" timeout 150 bash tools/graph_ab.sh $OUT/ab-fw . .exp/fw > $OUT/ab-fw.log 2>&1
log "fw graph_ab rc=$?"
cd $OUT && tar czf ab.tar.gz ab-layer ab-w4 ab-fw && rm -rf ab-layer ab-w4 ab-fw
log done
