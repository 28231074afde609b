#!/usr/bin/env bash
# Session 50, call 3 (2 x H200): what the kernel changes since the last two-GPU run cost or gained. The graph A/B
# (bench_graph --shapes ab, bf16 and fp8 e4m3fn, two rounds, s41 B B s41) of 1589d3c (session 41's main; its library
# is 30df1b9's, the last code timed on two GPUs) against main 6ddb99f (c54dd95, ef6dba0 and c33ea29 changed the
# dispatch and combine kernels, never timed on two GPUs); then the whole GPU suite at world 2 twice more (issue 35:
# three runs in a row, call 1's the first). Call 1's 4096-token rows are within 0.5% of session 33's on 2 x H200, so
# no A/B at 4096.
# Setup (here): git archive 1589d3c | tar -x -C .exp/s41 --exclude=docs; .exp/head and .exp/headb as in call 1.
# carry [".exp/s41", ".exp/headb", ".exp/head"] (.exp/s41 without tests/, benchmarks/ and examples/: the A/B times
# each tree's package with this checkout's benchmark).
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/s41 .exp/headb .exp/head:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
AB_ROUNDS=2 AB_GRAPH_ARGS="--fp8 e4m3fn" ab since41 230 .exp/s41 .exp/headb
(cd .exp/head && GPU_TEST_RUNS=2 bounded $((585 - (SECONDS - T0))) bash tools/gpu_run.sh $L/suite tests -rs > $L/suite.log 2>&1)
log "suite rc=$?"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs since41 2> /dev/null; rm -rf logs since41
log done
