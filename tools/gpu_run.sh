#!/usr/bin/env bash
# One call on a GPU node does it all: build the extension, run the GPU tests under torchrun on
# every GPU, run the benchmarks, and leave every log in OUT.
#   tools/gpu_run.sh OUT [all|STEP[,STEP...]] [extra pytest args...]
# STEP is one of build, tests, bench, graph, sweep, layer, host, profile, fp8, hf, hf_smoke, sanitize, soak, proxy (e.g.
# build,tests,graph).
# `tests` also writes the fault-injection table (tests/python/gpu/test_faults.py) to OUT/faults.txt and summary.txt,
# and the names of the tests that failed or hung (conftest's watchdog) to summary.txt; GPU_TEST_RUNS=N runs the suite N
# times in a row.
# On a one-GPU node the tests (and `soak`) run ONE_GPU_RANKS ranks on the GPU (default 2; 3 to 8 check the
# protocol at a larger world, 3, 5, 6 and 7 at one that is not a power of two; time-sliced: the whole suite takes
# several times as long, so GPU_TESTS, the test paths, default tests/python/gpu, lets it run a few files per call).
# `graph` runs benchmarks/bench_graph.py: dispatch + combine as CUDA-graph steady state and
# eager, challenge shapes and the DeepSeek-V3 shape at 1..4096 tokens. After `graph`, `fp8` or `layer`,
# benchmarks/perf_report.py writes OUT/perf_report.md: every speed target next to its measured value.
# `host` runs benchmarks/bench_host.py: the host time of each call (forward, split, training with backward)
# next to one plain torch op; on a one-GPU node (named only) under the MPS proxy, host times being the CPU's.
# `layer` runs examples/moe_layer.py and benchmarks/bench_moe_layer.py (the MoE layer at the
# DeepSeek-V3 shape: forward, backward, and its dispatch / combine / experts alone).
# `fp8` runs bench_graph.py --fp8 e4m3fn at the DeepSeek-V3 shape, 128 and 4096 tokens: fp8 dispatch next
# to bf16 in the same run (issue 13's targets). Not part of `all`.
# `hf` runs benchmarks/bench_hf_model.py: a DeepSeek-V3-shaped transformers model served by moe_a2a
# DP+EP, by transformers' own expert parallelism and by one GPU (prefill tokens/s, decode step time).
# `hf_smoke` runs it with --smoke (tiny model, few iterations: does it run end to end, unequal batches too); on a one-GPU
# node with 2 ranks time-sliced on the GPU, where `hf` is skipped. Neither is part of `all`.
# `sanitize` runs tools/sanitize.sh (the kernels under compute-sanitizer memcheck, racecheck, synccheck
# and initcheck, 2 ranks; SANITIZE_TOOLS=memcheck,... for fewer). `soak` runs tools/soak.py (10^5 mixed
# rounds, stopped after SOAK_MINUTES, default 6). Neither is part of `all`.
# `proxy` (named only) runs bench_graph.py with two ranks at once on GPU 0 under MPS (tools/mps_proxy.sh): a
# one-GPU proxy for before/after comparisons of kernel changes, not the machine's numbers; with
# `profile` on a one-GPU node, the traced benchmark runs the same way.
# `profile` rebuilds with the in-kernel profiler (MOE_A2A_PROFILE=1), runs its GPU tests and a
# traced benchmark (trace summary into summary.txt, timeline PNG); `all` ends with that pass,
# so the extension is left built with the profiler.
# Exit status: non-zero if the build or any test failed.
set -uo pipefail
OUT=${1:?usage: tools/gpu_run.sh OUT_DIR [all|STEP[,STEP...]] (steps: build tests bench graph sweep layer host profile fp8 hf hf_smoke sanitize soak proxy)}
WHAT=${2:-all}
asked() { [[ ",$WHAT," == *",$1,"* ]]; }  # named in the list (steps that `all` leaves out)
wants() { [ "$WHAT" = all ] || asked "$1"; }
shift $(( $# >= 2 ? 2 : 1 ))
mkdir -p "$OUT"
cd "$(dirname "$0")/.."

source tools/no_multicast_env.sh
source tools/bounded.sh
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
NGPU=$(python3 -c 'import torch; print(torch.cuda.device_count())')
# sources: tools/source_hash.sh (a device machine's copy of the tree may carry an older .git).
echo "== $(date -u +%FT%TZ) $(hostname) GPUs: $NGPU, sources $(bash tools/source_hash.sh)" \
  "(.git says $(git rev-parse --short HEAD 2>/dev/null || echo none))" | tee "$OUT/summary.txt"
NPROC=$NGPU
if [ "$NGPU" = 1 ]; then
  # One GPU: the tests run as a correctness smoke run, ONE_GPU_RANKS ranks (default 2; up to 8, the
  # protocol at a larger world) sharing it (tests/python/gpu/conftest.py); benchmarks need a GPU per rank.
  export MOE_A2A_TEST_ONE_GPU=1
  NPROC=${ONE_GPU_RANKS:-2}
  echo "-- one GPU: the tests run $NPROC ranks on it (correctness only); the benchmark steps are skipped" | tee -a "$OUT/summary.txt"
  for s in bench graph sweep layer; do
    [[ ",$WHAT," == *",$s,"* || "$WHAT" = all ]] && echo "-- $s: skipped (one GPU)" | tee -a "$OUT/summary.txt"
  done
  asked hf && echo "-- hf: skipped (one GPU; hf_smoke runs the script on it)" | tee -a "$OUT/summary.txt"
  asked fp8 && echo "-- fp8: skipped (one GPU)" | tee -a "$OUT/summary.txt"
  WHAT=$(echo ",$WHAT," | sed -e 's/,bench,/,/; s/,graph,/,/; s/,sweep,/,/; s/,layer,/,/; s/,hf,/,/; s/,fp8,/,/; s/^,//; s/,$//')
  [ "$WHAT" = all ] && WHAT=build,tests,profile
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | tee -a "$OUT/summary.txt"
status=0

# step NAME TIMEOUT_S CMD...: runs CMD, logs to OUT/NAME.log, records the outcome. Bounded by tools/bounded.sh: past
# its limit everything the step started gets a TERM (torchrun stops its ranks), then a KILL; `timeout` left them.
step() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  bounded "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  local line
  line=$(grep -E "^[0-9]+ (passed|failed)|(passed|failed)(,| in )" "$OUT/$name.log" | tail -n 1)
  echo "-- $name: rc=$rc $((SECONDS - t0))s ${line}" | tee -a "$OUT/summary.txt"
  [ $rc -eq 0 ] || status=1
  return $rc
}

# An extension left built with the profiler by an earlier call on this machine (`profile` ends
# with that build) would make every later step time and test the profiler's build, and one built
# without the tests' hooks (a user's `pip install`) fails the tests at their start: rebuilt.
built_otherwise() {
  python3 -c 'import sys, moe_a2a._C as C; sys.exit(0 if C.profiler_compiled_in() or not C.TEST_HOOKS else 1)' 2>/dev/null
}
if wants build || { [ "$WHAT" != profile ] && { [ ! -e python/moe_a2a/_C*.so ] || built_otherwise; }; }; then
  # --force: the previous build may have had other flags (the profiler, no test hooks), same sources
  step build 900 env MOE_A2A_PROFILE=0 MOE_A2A_TEST_HOOKS=1 MAX_JOBS="$(nproc)" python3 setup.py build_ext --inplace --force \
    || { tail -40 "$OUT/build.log"; exit 1; }
fi
# The tests that failed, errored or timed out (tests/python/gpu/conftest.py's watchdog) in a pytest log,
# once each, into the summary.
name_failures() {
  grep -hE "^(FAILED|ERROR) |GPU TEST TIMEOUT" "$1" 2>/dev/null | sed -e 's/ - .*//' | sort -u | sed -e 's/^/   /' \
    | tee -a "$OUT/summary.txt"
}
# failure_texts DIR (relative to OUT): names each failure's text that tests/python/gpu/conftest.py saved in DIR as it
# happened (MOE_A2A_RESULTS_DIR; kept if the run was killed: pytest prints them only at the session's end).
failure_texts() {
  ls "$OUT/$1"/failures-rank*.txt >/dev/null 2>&1 \
    && echo "-- failure texts: $(cd "$OUT" && echo "$1"/failures-rank*.txt)" | tee -a "$OUT/summary.txt"
}
if wants tests; then
  # GPU_TEST_RUNS=N runs the whole suite N times in a row (a hang or a flaky failure shows in one of them).
  for run in $(seq 1 "${GPU_TEST_RUNS:-1}"); do
    name=gpu_tests
    [ "${GPU_TEST_RUNS:-1}" -gt 1 ] && name=gpu_tests_run$run
    step $name 600 env MOE_A2A_RESULTS_DIR="$OUT" \
      torchrun --nproc-per-node="$NPROC" -m pytest ${GPU_TESTS:-tests/python/gpu} -q -rfE -p no:cacheprovider "$@"
    name_failures "$OUT/$name.log"
  done
  failure_texts .
  [ -f "$OUT/faults.txt" ] && cat "$OUT/faults.txt" >>"$OUT/summary.txt"
fi
if wants bench; then
  step bench_all2all 400 torchrun --nproc-per-node="$NGPU" benchmarks/bench_all2all.py --harness --out "$OUT"
fi
if wants graph; then
  step bench_graph 400 torchrun --nproc-per-node="$NGPU" benchmarks/bench_graph.py --gemm --out "$OUT"
  grep -A 20 -E "^ *shape " "$OUT/bench_graph.log" | tee -a "$OUT/summary.txt"
fi
if wants sweep; then
  step bench_sweep 400 torchrun --nproc-per-node="$NGPU" benchmarks/bench_sweep.py --out "$OUT"
fi
if wants layer; then
  step example 120 torchrun --nproc-per-node="$NGPU" examples/moe_layer.py
  step bench_moe_layer 400 torchrun --nproc-per-node="$NGPU" benchmarks/bench_moe_layer.py --out "$OUT"
fi
if wants host; then
  if [ "$NGPU" -gt 1 ]; then
    step bench_host 300 torchrun --nproc-per-node="$NGPU" benchmarks/bench_host.py --out "$OUT"
  else  # `all` on one GPU leaves it out (build,tests,profile); named, it runs under MPS
    step bench_host 300 bash tools/mps_proxy.sh "$OUT" benchmarks/bench_host.py
  fi
  grep -A 40 "^host us" "$OUT/bench_host.log" | tee -a "$OUT/summary.txt"
fi
if asked fp8; then
  step bench_fp8 400 torchrun --nproc-per-node="$NGPU" benchmarks/bench_graph.py --shapes "256,8,7168,128;256,8,7168,4096" \
    --fp8 e4m3fn --out "$OUT/fp8"
  grep -A 4 "^fp8 (" "$OUT/bench_fp8.log" | tee -a "$OUT/summary.txt"
fi
if wants graph || asked fp8 || asked layer; then  # every speed target next to its value (benchmarks/targets.py)
  python3 benchmarks/perf_report.py "$OUT" --out "$OUT/perf_report.md" >/dev/null &&
    sed -n '/^Targets met/,/^$/p;/^Training rounds/,/^$/p;/^| target/,/^$/p' "$OUT/perf_report.md" |
    tee -a "$OUT/summary.txt"
fi
if asked hf; then
  step bench_hf_model 600 torchrun --nproc-per-node="$NGPU" benchmarks/bench_hf_model.py --out "$OUT"
  grep -A 30 "^B/rank" "$OUT/bench_hf_model.log" | tee -a "$OUT/summary.txt"
fi
if asked hf_smoke; then  # NPROC: 2 ranks on the one GPU of a one-GPU node (MOE_A2A_TEST_ONE_GPU=1 above)
  step bench_hf_model_smoke 300 torchrun --nproc-per-node="$NPROC" benchmarks/bench_hf_model.py --smoke \
    --batches 1,8,64,1:8 --out "$OUT"  # 1:8: the ranks' batches unequal
  grep -A 30 "^B/rank" "$OUT/bench_hf_model_smoke.log" | tee -a "$OUT/summary.txt"
fi
if asked sanitize; then
  step sanitize 2100 bash tools/sanitize.sh "$OUT" "${SANITIZE_TOOLS:-memcheck,racecheck,synccheck,initcheck}"
  grep "^-- sanitize" "$OUT/sanitize.log" | tee -a "$OUT/summary.txt"
fi
if asked soak; then
  step soak 900 torchrun --nproc-per-node="$NPROC" tools/soak.py --out "$OUT" --max-minutes "${SOAK_MINUTES:-6}"
  grep "^SOAK_RESULT" "$OUT/soak.log" | tee -a "$OUT/summary.txt"
fi
if asked proxy; then
  step proxy 500 bash tools/mps_proxy.sh "$OUT/proxy"
  grep -A 12 -E "^ *shape " "$OUT/proxy.log" | tee -a "$OUT/summary.txt"
  (cd "$OUT" && tar czf proxy.tar.gz proxy && rm -rf proxy) || true
fi
if wants profile; then
  if step build_profiler 900 env MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=1 MAX_JOBS="$(nproc)" python3 setup.py build_ext \
    --inplace --force; then
    mkdir -p "$OUT/profiler_failures"
    step profiler_tests 300 env MOE_A2A_RESULTS_DIR="$OUT/profiler_failures" torchrun --nproc-per-node="$NPROC" \
      -m pytest tests/python/gpu/test_profiler.py -q -rfE -p no:cacheprovider "$@"
    name_failures "$OUT/profiler_tests.log"
    failure_texts profiler_failures
    trace_args=(--systems moe_a2a --no-microbench --trace "$OUT/trace.json")
    if [ "$NGPU" -gt 1 ] || asked proxy; then  # the traced benchmark needs a GPU per rank, or the MPS proxy
      if [ "$NGPU" -gt 1 ]; then
        step bench_trace 400 torchrun --nproc-per-node="$NGPU" benchmarks/bench_all2all.py --shapes 256,8,7168,256 \
          "${trace_args[@]}" --out "$OUT/bench_trace"
      else
        step bench_trace 400 bash tools/mps_proxy.sh "$OUT/bench_trace" benchmarks/bench_all2all.py \
          --shapes "256,8,7168,1;256,8,7168,128" --no-graph --no-check --trace-graph 8 "${trace_args[@]}"
      fi
      grep -E "^trace" "$OUT/bench_trace.log" | tee -a "$OUT/summary.txt"
      traced=$(ls "$OUT"/trace-*.json 2>/dev/null)
      if [ -n "$traced" ]; then
        for t in $traced; do  # one per shape: trace-<shape>.json
          label=$(basename "$t" .json)
          label=${label#trace-}
          step "trace_check-$label" 120 python3 -m moe_a2a.trace check "$t"
          step "trace_summary-$label" 300 python3 -m moe_a2a.trace summary "$t" --png "$OUT/trace-$label.png"
          sed -n '1,200p' "$OUT/trace_summary-$label.log" >>"$OUT/summary.txt"
          step "trace_timeline-$label" 120 python3 -m moe_a2a.trace timeline "$t" --waves
          cat "$OUT/trace_timeline-$label.log" >>"$OUT/summary.txt"
          step "trace_chain-$label" 120 python3 -m moe_a2a.trace chain "$t"
          cat "$OUT/trace_chain-$label.log" >>"$OUT/summary.txt"
        done
      else
        echo "-- trace: no trace file written (see bench_trace.log)" | tee -a "$OUT/summary.txt"
        status=1
      fi
      # bench_trace/ holds the traced run's own tables; archived below with the logs.
      (cd "$OUT" && tar czf bench_trace.tar.gz bench_trace && rm -rf bench_trace) || true
    fi
  else
    tail -40 "$OUT/build_profiler.log"
  fi
fi
# The device tool brings back at most 8 files: keep the summary and the plots loose and put
# every log, JSON and CSV into one archive.
(cd "$OUT" && tar czf results.tar.gz --remove-files $(ls *.log *.json *.csv *.tar.gz 2>/dev/null | grep -v '^results.tar.gz$')) || true
cat "$OUT/summary.txt"
exit $status
