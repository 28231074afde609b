#!/usr/bin/env bash
# untracked driver for one device call (issue 40: zero only the rows an expert's GEMM reads)
set -u
source tools/no_multicast_env.sh
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*"; }
rm -rf /tmp/base && mkdir -p /tmp/base && tar c --exclude=./build --exclude='./python/moe_a2a/_C*.so' . | tar x -C /tmp/base
(cd /tmp/base && patch -s -R -p1 < ab40.patch) || { echo "patch -R failed"; exit 1; }
(cd /tmp/base && env MOE_A2A_PROFILE=0 MAX_JOBS=8 timeout 240 python3 setup.py build_ext --inplace --force > $OUT/build-base.log 2>&1; echo "base build rc=$?") &
env MOE_A2A_PROFILE=0 MAX_JOBS=8 timeout 240 python3 setup.py build_ext --inplace --force > $OUT/build-new.log 2>&1; echo "new build rc=$?"
wait
log builds done
B="--phases dispatch,combine,dispatch-bwd,combine-bwd --iters 30"
for i in 1 2; do
  (cd /tmp/base && PYTHONPATH=/tmp/base/python timeout 100 torchrun --nproc-per-node=2 benchmarks/bench_moe_layer.py $B --out $OUT/base$i > $OUT/layer-base$i.log 2>&1); log "base$i rc=$?"
  PYTHONPATH=$PWD/python timeout 100 torchrun --nproc-per-node=2 benchmarks/bench_moe_layer.py $B --out $OUT/new$i > $OUT/layer-new$i.log 2>&1; log "new$i rc=$?"
done
for f in base1 new1 base2 new2; do echo "== $f"; grep -E "^ +[0-9]+ " $OUT/layer-$f.log; done
bash tools/gpu_run.sh $OUT/suite tests > $OUT/suite.log 2>&1; log "suite rc=$?"
grep -E "^-- |^   " $OUT/suite/summary.txt
# negative check: the same tree with the zeroing taken out; the strengthened test must fail
rm -rf /tmp/neg && mkdir /tmp/neg && tar c . | tar x -C /tmp/neg
cd /tmp/neg && sed -i 's|  if (cfg.packed() \&\& cfg.expert_alignment == 1) return;  // segments without padding|  return;|' csrc/ep/combine_backward.cu && grep -c "^  return;$" csrc/ep/combine_backward.cu
env MOE_A2A_PROFILE=0 MAX_JOBS=16 timeout 120 python3 setup.py build_ext --inplace > $OUT/build-neg.log 2>&1; log "neg build rc=$?"
PYTHONPATH=/tmp/neg/python timeout 90 torchrun --nproc-per-node=2 -m pytest tests/python/gpu/test_autograd.py -q -p no:cacheprovider -k rows_an_experts_gemm > $OUT/negative.log 2>&1; log "negative rc=$? (expected: failures)"
grep -E "passed|failed|^FAILED" $OUT/negative.log | sort -u | head
