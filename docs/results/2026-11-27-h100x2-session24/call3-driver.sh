#!/usr/bin/env bash
# Call 3, nvidia-h100-x2: at the mid shapes with counts drawn, the rank with more tokens sends on every block and
# receives only once its sends are acknowledged (call 1's trace, E256-K8-H7168-T256: its blocks' publishes end near
# 14.5 us, a link-bound drain, then 9.5 us of receiving), while the peer's rows sat in recv_x since 6 us. Does a split
# (blocks that only send, the others receiving from the start) pay there? No code change: main (9b59f43) built in
# place, bench_graph.py at four mid shapes, counts drawn and max, with --send-sms auto (no split below 1024 tokens
# past 65 groups), 22, 44 and 66 dispatch senders (combine auto), two rounds in alternating order.
source tools/device_call.sh
bash tools/gpu_run.sh $L/build build > $L/build.log 2>&1
log "build rc=$?"
S4="128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,128"
run() {
  timeout 60 torchrun --nproc-per-node=2 benchmarks/bench_graph.py --shapes "$S4" --counts "drawn;max" --send-sms "$1,auto" \
    --replays 10 --iters 30 --no-microbench --no-floor --out $OUT/s$1-r$2 > $L/s$1-r$2.log 2>&1
  log "send-sms $1 round $2 rc=$?"
}
for s in auto 22 44 66; do run $s 1; done
for s in 66 44 22 auto; do run $s 2; done
cd $OUT && tar czf all.tar.gz logs s* && rm -rf logs s*
log done
