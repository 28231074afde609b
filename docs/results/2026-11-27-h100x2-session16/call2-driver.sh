#!/usr/bin/env bash
# Session 16, call 2 (nvidia-h100-x2): the backward of combine with one wave sum per (row, k) (0a57cbc) against
# c5a7aa9 (.exp/base: main before it), both built by tools/gpu_run.sh (test hooks in both). bench_moe_layer from
# this tree (with hbm-y, 2ae8785) times both packages, alternating base, new, new, base: DeepSeek-V3, every rank
# T = 128 / 512 / 2048, the all-to-all rounds of issue 40 and hbm-y. Then the whole GPU suite on this tree.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
O=/tmp/o2; rm -rf $O; mkdir -p $O/layer
build() { (cd $1 && timeout 240 env MAX_JOBS=14 bash tools/gpu_run.sh $O/$2_build build > $O/$2_build_driver.log 2>&1; echo "$2 build rc=$?" >> $O/$2_build_driver.log); }
build . new & build .exp/base base &
wait; for n in new base; do log "$(tail -1 $O/${n}_build_driver.log)"; done
i=0
for n in base new new base; do
  i=$((i + 1)); pkg=$([ $n = new ] && echo $PWD/python || echo $PWD/.exp/base/python)
  floor=$([ $i = 2 ] && echo --floor || echo --no-floor)
  PYTHONPATH=$pkg timeout 150 torchrun --master-port=2964$i --nproc-per-node=2 benchmarks/bench_moe_layer.py \
    --tokens 128,512,2048 --iters 30 --phases dispatch,combine-bwd,combine-bwd-y,hbm-y --no-check $floor \
    --out $O/layer/$i-$n > $O/layer/$i-$n.log 2>&1
  log "layer run $i ($n) rc=$?"; pkill -f torchrun
done
tar czf $OUT/o.tar.gz -C /tmp o2
timeout $((590 - SECONDS + T0)) bash tools/gpu_run.sh $O/suite tests > $O/suite_driver.log 2>&1
log "suite rc=$?"; cp $O/suite/summary.txt $OUT/suite_summary.txt
tar czf $OUT/o.tar.gz -C /tmp o2
log done
