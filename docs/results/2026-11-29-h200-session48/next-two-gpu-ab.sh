#!/usr/bin/env bash
# Prepared, not run (no two-GPU kind was lent in session 48): c33ea29 changed the dispatch kernel's code (a bad id no
# longer sets the counts' error bit; every sm_90 instance 3.3-4.2 KB smaller) and report_error's order (combine and
# its backward 0.2-0.3 KB larger), with no GPU to time them on. On 2 GPUs, before or beside session 42's call 2: graph
# d+c of the A/B shapes, bf16 and fp8 e4m3fn, b425dc9 against main, alternated twice (A B B A).
# Setup (here): mkdir -p .exp/b425 .exp/main; git archive b425dc9 | tar -x -C .exp/b425 --exclude=docs;
# git archive HEAD | tar -x -C .exp/main --exclude=docs. carry [".exp/b425", ".exp/main"]. About 300 s.
source tools/device_call.sh
AB_ROUNDS=2 AB_GRAPH_ARGS="--fp8 e4m3fn" ab error-order 400 .exp/b425 .exp/main
cd $OUT && tar cJf all.tar.xz logs error-order 2> /dev/null; rm -rf logs error-order
log done
