#!/usr/bin/env bash
# Session 22, call 1, nvidia-h100-x2: (1) the flagged weight gradients (main c31db22) against 03be39f (the main
# before them) at unequal counts, the layer's eager rounds; (2) a trace of main's small rounds in graph steady state
# (profiler build); (3) the whole GPU suite on main (its fixed test of dropped pairs has not run on a GPU).
# Setup (on the CPU machine, from this checkout on main):
#   for d in before flagged flaggedt prof; do rm -rf .exp/$d; mkdir -p .exp/$d; done
#   git archive 03be39f | tar -x -C .exp/before
#   for d in flagged flaggedt prof; do git archive c31db22 | tar -x -C .exp/$d; done
#   rm -rf .exp/{before,flagged,flaggedt,prof}/docs
# carry [".exp/before", ".exp/flagged", ".exp/flaggedt", ".exp/prof"].
source tools/device_call.sh
(cd .exp/prof && MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=0 MAX_JOBS=4 timeout 300 \
  python3 setup.py build_ext --inplace --force > $L/build-prof.log 2>&1; echo "build prof rc=$?" >> $OUT/driver.log) &
prof_pid=$!
BUILD_TIMEOUT=250 bash tools/build_trees.sh $L .exp/before .exp/flagged .exp/flaggedt:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1 AB_ROUNDS=2 AB_BENCH=layer
AB_LAYER_ARGS="--tokens 2048 --counts 0/2048;2048/512 --phases dispatch,combine-bwd" \
  timeout 100 bash tools/graph_ab.sh $OUT/ab2048 .exp/before .exp/flagged > $L/ab2048.log 2>&1
log "ab 2048 rc=$?"; cp $OUT/ab2048/compare.md $OUT/compare-2048.md
AB_LAYER_ARGS="--tokens 128 --counts drawn;0/128 --phases dispatch,combine-bwd" \
  timeout 80 bash tools/graph_ab.sh $OUT/ab128 .exp/before .exp/flagged > $L/ab128.log 2>&1
log "ab 128 rc=$?"; cp $OUT/ab128/compare.md $OUT/compare-128.md
wait $prof_pid; log "prof built"
mkdir -p $OUT/trace
(cd .exp/prof && PYTHONPATH=$PWD/python timeout 90 torchrun --nproc-per-node=2 benchmarks/bench_all2all.py \
  --shapes "256,8,7168,1;8,2,6144,16;64,6,2048,32" --no-graph --no-check --trace-graph 8 --systems moe_a2a \
  --no-microbench --trace $OUT/trace/trace > $OUT/trace/bench_all2all-traced.log 2>&1)
log "trace rc=$?"
for f in $OUT/trace/trace-*.json; do
  n=$(basename $f .json)
  (cd .exp/prof && PYTHONPATH=$PWD/python python3 -m moe_a2a.trace chain $f > $OUT/trace/chain-$n.txt 2>&1
   PYTHONPATH=$PWD/python python3 -m moe_a2a.trace summary $f > $OUT/trace/summary-$n.txt 2>&1)
  gzip $f
done
log "chains done"
timeout 300 bash .exp/flaggedt/tools/gpu_run.sh $OUT/suite tests > $L/suite-driver.log 2>&1
log "suite rc=$?"; cp $OUT/suite/summary.txt $OUT/suite-summary.txt
cd $OUT && tar czf all.tar.gz logs ab2048 ab128 suite && rm -rf logs ab2048 ab128 suite
log done
