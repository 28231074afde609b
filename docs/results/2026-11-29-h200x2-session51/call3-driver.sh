#!/usr/bin/env bash
# Session 51, call 3 (2 x H200): the whole GPU suite at world 2 on the library as it lands (f9f0c43's kernels and
# the test fix after call 2: test_weights_at_experts.py's layer tests imported ExpertParallelMoE from moe_a2a).
# Setup (here): git archive HEAD into .exp/fin (--exclude=docs). carry [".exp/fin"].
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/fin:hooks >> $OUT/driver.log
log "built rc=$?"
(cd .exp/fin && bounded $((570 - (SECONDS - T0))) bash tools/gpu_run.sh $L/suite tests -rs > $L/suite.log 2>&1)
log "suite rc=$?"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2> /dev/null
tail -40 $L/suite.log > $OUT/suite-tail.txt
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
