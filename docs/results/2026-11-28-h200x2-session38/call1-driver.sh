#!/usr/bin/env bash
# Session 38, call 1 (nvidia-h200-x2; no H100 lent): main 4f57e58 as it landed, about 540 s with the start.
# .exp/rel = main's tree without docs/, .exp/relh = the same built with the test hooks. The whole GPU suite, then
# bench_hf_model.py twice (all three systems; issue 37's table, and the rows' decode_graph_shared_beside: the MoE
# layers whose shared expert the graph ran beside the exchange, 3 expected), then bench_experts.py.
# carry [".exp/rel", ".exp/relh"].
source tools/device_call.sh
BUILD_TIMEOUT=240 bash tools/build_trees.sh $L .exp/rel .exp/relh:hooks >> $OUT/driver.log
log "built rc=$?"
bounded 240 bash -c "cd .exp/relh && bash tools/gpu_run.sh $L/suite tests > $L/suite.log 2>&1"
log "suite rc=$? $(grep -E '^-- gpu_tests' $L/suite/summary.txt)"
grep -A12 "^-- gpu_tests" $L/suite/summary.txt | grep -E "FAILED|ERROR|TIMEOUT" | head -20 >> $OUT/driver.log
BENCH_TREE=.exp/rel bench hf 110 benchmarks/bench_hf_model.py
BENCH_TREE=.exp/rel bench hf2 110 benchmarks/bench_hf_model.py
for r in hf hf2; do
  echo "== $r"; grep -B1 -A4 "^B/rank  prefill vs" $L/$r.log; grep -A11 "^B/rank  *system" $L/$r.log | head -12
  grep -o '"decode_graph_shared_beside": [0-9]*' $OUT/$r/bench_hf_model.json | sort | uniq -c
done > $OUT/hf-summary.txt
(cd .exp/rel && PYTHONPATH=python bounded 100 python3 benchmarks/bench_experts.py --tokens 1,2,8,16 \
  --json $OUT/bench_experts.json > $L/bench_experts.log 2>&1)
log "bench_experts rc=$?"
tail -16 $L/bench_experts.log > $OUT/experts-summary.txt
cd $OUT && tar cJf all.tar.xz logs hf hf2 2> /dev/null; rm -rf logs hf hf2
log done
