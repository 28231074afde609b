#!/usr/bin/env bash
# bwd_ab.sh R: base (.exp/base) and this tree alternately, bench_host at T=1 and 128, 1000 iterations, x add of training rows.
R=$1; mkdir -p $R
source tools/no_multicast_env.sh
for t in .exp/base .; do
  [ -f $t/python/moe_a2a/_C*.so ] || (cd $t && MOE_A2A_PROFILE=0 MAX_JOBS=8 python3 setup.py build_ext --inplace > $R/build-$(basename $t).log 2>&1) &
done
wait
ls .exp/base/python/moe_a2a/ python/moe_a2a/ | grep "\.so"
for run in base this base2 this2 base3 this3; do
  pkg=$PWD/python; [[ $run == base* ]] && pkg=$PWD/.exp/base/python
  MOE_A2A_PACKAGE_DIR=$pkg timeout 120 bash tools/mps_proxy.sh $R/$run benchmarks/bench_host.py --iters 1000 > $R/$run.log 2>&1
  echo "== $run"; grep -E "training|forward +sum" $R/$run.log
done
