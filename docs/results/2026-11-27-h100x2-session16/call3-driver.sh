#!/usr/bin/env bash
# Session 16, call 3 (nvidia-h100-x2): the L2 hint in the backward of combine. Three trees, each built by
# tools/gpu_run.sh (test hooks in all): .exp/ws (30b9dbf: one wave sum per (row, k), no hint), this tree (75d0e81:
# the hint one chunk ahead) and .exp/p2 (the same, two chunks ahead). bench_moe_layer from this tree times each
# package in the order ws, p1, p2, p2, p1, ws (DeepSeek-V3, every rank T = 128 / 512 / 2048); then the whole GPU
# suite on this tree.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
O=/tmp/o3; rm -rf $O; mkdir -p $O/layer
build() { (cd $1 && timeout 240 env MAX_JOBS=10 bash tools/gpu_run.sh $O/$2_build build > $O/$2_build_driver.log 2>&1; echo "$2 build rc=$?" >> $O/$2_build_driver.log); }
build . p1 & build .exp/ws ws & build .exp/p2 p2 &
wait; for n in p1 ws p2; do log "$(tail -1 $O/${n}_build_driver.log)"; done
i=0
for n in ws p1 p2 p2 p1 ws; do
  i=$((i + 1)); pkg=$([ $n = p1 ] && echo $PWD/python || echo $PWD/.exp/$n/python)
  PYTHONPATH=$pkg timeout 100 torchrun --master-port=2965$i --nproc-per-node=2 benchmarks/bench_moe_layer.py \
    --tokens 128,512,2048 --iters 30 --phases dispatch,combine-bwd,combine-bwd-y,hbm-y --no-check --no-floor \
    --out $O/layer/$i-$n > $O/layer/$i-$n.log 2>&1
  log "layer run $i ($n) rc=$?"; pkill -f torchrun
done
tar czf $OUT/o.tar.gz -C /tmp o3
timeout $((590 - SECONDS + T0)) bash tools/gpu_run.sh $O/suite tests > $O/suite_driver.log 2>&1
log "suite rc=$?"; cp $O/suite/summary.txt $OUT/suite_summary.txt
tar czf $OUT/o.tar.gz -C /tmp o3
log done
