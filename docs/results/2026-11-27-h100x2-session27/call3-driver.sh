#!/usr/bin/env bash
# Call 3 (nvidia-h100-x2). Call 2 found count_ids (count_pairs' loop not inlined) the part of next-shrink.patch that
# loses: +0.5-1.0 us at the small shapes and +4 / +6 us at 4096 tokens (bf16 / fp8), while combine's one site was
# neutral and dispatch's one send_group site gained. cs = next-shrink.patch without count_ids (part-count-ids.patch
# reversed): graph d+c against main, two rounds, the ten README shapes drawn and 4096 bf16 / fp8; then the whole suite
# on cs with the test hooks, in what time is left.
# Setup (here): .exp/base = git archive HEAD; .exp/cs and .exp/csh = HEAD + next-shrink.patch - part-count-ids.patch.
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/base .exp/cs .exp/csh:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1 AB_ROUNDS=2
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_GRAPH_ARGS="--shapes $S --counts drawn" ab graph 110 .exp/base .exp/cs
AB_GRAPH_ARGS="--shapes 256,8,7168,4096 --counts drawn --fp8 e4m3fn" ab big 90 .exp/base .exp/cs
left=$((555 - (SECONDS - T0)))
bounded $left bash -c "cd .exp/csh && bash tools/gpu_run.sh $L/suite tests > $L/suite.log 2>&1"
log "suite rc=$?"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2> /dev/null
cp $L/suite/failures-rank*.txt $OUT/ 2> /dev/null
cd $OUT && tar czf all.tar.gz logs graph big 2> /dev/null; rm -rf logs graph big
log done
