#!/usr/bin/env bash
# Before/after graph timing of kernel changes, in one call.
#   tools/graph_ab.sh OUT TREE [TREE...]
# TREE is a source tree: "." for this checkout, or a folder holding another version of it (on the
# device machine, one carried there: CONTRIBUTING.md, "Timing a kernel change"). The trees are built in
# place, all at once (the default build, no profiler), and each package is timed by this checkout's
# benchmarks/bench_graph.py --shapes ab (10 replays) into OUT/<n>-<tree name>/: under torchrun on every GPU
# of a node with two or more, else by the MPS proxy (tools/mps_proxy.sh: both ranks at once on the one
# GPU). The first tree is the base and is timed once more at the end (OUT/<n+1>-base-again/), so drift
# of the machine over the call shows as base vs base-again.
# AB_ROUNDS=N (default 1) times the trees N times, in order, then in reverse order, and so on (A B C C B A
# A B C ...; runs named TREE, TREE.r2, ...): a change of 0.3 us is judged against the spread of its own
# runs, and drift over the call falls on every tree alike. With N >= 2 the base-again run is left out
# (the rounds end on the base when N is even). benchmarks/compare_graph.py writes
# OUT/compare.md (every run's graph d+c per shape, and its ratio to the base's).
# AB_BENCH=host times host time instead: benchmarks/bench_host.py (each call in units of a torch.add
# timed in the same iteration, "x add"), compared the same way. AB_BENCH=layer times
# benchmarks/bench_moe_layer.py (eager device time of the MoE layer's all-to-all rounds, forward and
# backward, and hbm-y; DeepSeek-V3, 128 / 512 / 2048 tokens a rank; AB_LAYER_ARGS: more or other
# arguments, e.g. "--tokens 512 --phases combine-bwd,dispatch"), compared per (T, phase). Default
# AB_BENCH=graph.
# AB_GRAPH_ARGS: more bench_graph.py arguments for every tree (e.g. "--fp8 e4m3fn": each shape's fp8
# dispatch too, next to the token dtype's; compare.md has a line for each).
# AB_BUILT=1: the trees are built already (an earlier graph_ab of the same call, on the same trees), so
# several A/Bs with different benchmark arguments share one build.
# Exit status: non-zero if a build or a run failed.
set -uo pipefail
usage="usage: tools/graph_ab.sh OUT TREE [TREE...]"
OUT=${1:?$usage}
shift
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
HERE=$(cd "$(dirname "$0")/.." && pwd)
source "$HERE/tools/no_multicast_env.sh"
NGPU=$(python3 -c 'import torch; print(torch.cuda.device_count())')
echo "-- $NGPU GPU(s): $([ "$NGPU" -ge 2 ] && echo "torchrun on every GPU" || echo "the one-GPU MPS proxy")"
BENCH=${AB_BENCH:-graph}
# Per benchmark: its arguments, those it takes under torchrun only (the proxy passes its own), and the
# file each run writes.
case $BENCH in
  graph)
    bench_args=(benchmarks/bench_graph.py --shapes ab --replays 10 --iters 30 ${AB_GRAPH_ARGS:-})
    torchrun_args=(--no-microbench --no-floor) result=bench_graph.json ;;
  host) bench_args=(benchmarks/bench_host.py) torchrun_args=(--no-microbench) result=bench_host.json ;;
  layer)
    # the MoE layer needs a GPU a rank (its weights); the one-GPU proxy times kernels, not the layer
    [ "$NGPU" -ge 2 ] || { echo "AB_BENCH=layer needs two or more GPUs, this node has $NGPU" >&2; exit 2; }
    # shellcheck disable=SC2054,SC2206  # the phases are one comma list; AB_LAYER_ARGS is split on purpose
    bench_args=(benchmarks/bench_moe_layer.py --tokens 128,512,2048 --iters 30 --no-check
      --phases dispatch,combine,dispatch-bwd,combine-bwd,combine-bwd-y,hbm-y ${AB_LAYER_ARGS:-})
    torchrun_args=(--no-floor) result=bench_moe_layer.json ;;
  *) echo "AB_BENCH must be graph, host or layer, got $BENCH" >&2; exit 2 ;;
esac
rounds=${AB_ROUNDS:-1}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "AB_ROUNDS must be a positive integer, got $rounds" >&2; exit 2; }
status=0
runs=() names=()

time_tree() {  # time_tree DIR TREE: TREE's package timed by this checkout's benchmark (bench_args) into DIR
  local dir=$1 package
  package=$(cd "$2" && pwd)/python
  mkdir -p "$dir"
  if [ "$NGPU" -ge 2 ]; then
    (cd "$HERE" && PYTHONPATH="$package" torchrun --nproc-per-node="$NGPU" "${bench_args[@]}" \
      "${torchrun_args[@]}" --out "$dir") >"$dir.log" 2>&1
  else
    MOE_A2A_PACKAGE_DIR="$package" bash "$HERE/tools/mps_proxy.sh" "$dir" "${bench_args[@]}" >"$dir.log" 2>&1
  fi
}

tree_version() {  # the tree's commit, marked if it has changes; a plain copy has none of its own
  local top
  top=$(cd "$1" && git rev-parse --show-toplevel 2>/dev/null) || { echo "not a git checkout"; return; }
  [ "$top" = "$(cd "$1" && pwd -P)" ] || { echo "a copy inside $top, no commit of its own"; return; }
  echo "$(git -C "$1" rev-parse --short HEAD)$([ -n "$(git -C "$1" status --porcelain --untracked-files=no)" ] && echo ' + uncommitted changes')"
}

# Every tree is built first, all at once, by tools/build_trees.sh (device time is what these calls
# spend: nvcc of one tree leaves most cores idle, its largest file takes most of a build), then timed
# one after the other. Its line "build NAME rc=N" a tree comes in the trees' order.
labels=()
i=0
for tree in "$@"; do
  i=$((i + 1))
  labels+=("$i-$([ "$tree" = . ] && echo this || basename "$tree")")
  echo "-- $i: $tree (sources $(bash "$HERE/tools/source_hash.sh" "$tree"); $(tree_version "$tree"))"
done
built=()
if [ "${AB_BUILT:-0}" = 1 ]; then
  for _ in "$@"; do built+=(1); done
else
  mapfile -t build_lines < <(bash "$HERE/tools/build_trees.sh" "$OUT/builds" "$@")
  for j in $(seq 0 $(($# - 1))); do
    if [[ ${build_lines[$j]:-} == *" rc=0" ]]; then built+=(1); else built+=(0); fi
  done
fi
trees=("$@")
n=${#trees[@]}
for j in "${!trees[@]}"; do
  [ "${built[$j]}" = 1 ] || { echo "-- ${labels[$j]#*-}: build failed (see $OUT/builds/)"; status=1; }
done
run=0
for round in $(seq 1 "$rounds"); do
  for step in $(seq 0 $((n - 1))); do
    j=$([ $((round % 2)) = 1 ] && echo "$step" || echo $((n - 1 - step)))  # odd rounds in order, even reversed
    [ "${built[$j]}" = 1 ] || continue
    run=$((run + 1))
    name=${labels[$j]#*-}$([ "$round" = 1 ] || echo ".r$round")
    label=$([ "$rounds" = 1 ] && echo "${labels[$j]}" || echo "$run-$name")
    if time_tree "$OUT/$label" "${trees[$j]}"; then
      runs+=("$OUT/$label/$result")
      names+=("$name")
    else
      echo "-- $name: the timing run failed (see $OUT/$label.log)"
      status=1
    fi
  done
done
if [ "$rounds" = 1 ]; then
  if time_tree "$OUT/$((n + 1))-base-again" "$1"; then
    runs+=("$OUT/$((n + 1))-base-again/$result")
    names+=(base-again)
  else
    echo "-- base-again: the timing run failed"
    status=1
  fi
fi
if [ ${#runs[@]} -ge 2 ]; then
  names_csv=$(IFS=,; echo "${names[*]}")
  python3 "$HERE/benchmarks/compare_graph.py" "${runs[@]}" --names "$names_csv" --out "$OUT/compare.md"
fi
# The device tool brings back few files: compare.md stays loose, everything else goes into one archive.
(cd "$OUT" && tar czf results.tar.gz --remove-files $(ls | grep -v -e '^compare.md$' -e '^results.tar.gz$')) || true
exit $status
