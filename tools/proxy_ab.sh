#!/usr/bin/env bash
# Before/after timing of kernel changes on a one-GPU node, in one call.
#   tools/proxy_ab.sh OUT TREE [TREE...]
# TREE is a source tree: "." for this checkout, or a folder holding another version of it (on the
# device machine, one carried there: see CONTRIBUTING.md, "Timing a kernel change on a one-GPU node").
# Each tree is built in place (the default build, no profiler), then timed by the standard proxy run
# (tools/mps_proxy.sh: both ranks at once under MPS) into OUT/<n>-<tree name>/. The first tree is the
# base and is timed once more at the end (OUT/<last>-base-again/), so drift of the machine over the
# call shows as base vs base-again. benchmarks/compare_graph.py writes OUT/compare.md (every run's
# graph d+c per shape and its ratio to the base). Exit status: non-zero if a build or a run failed.
set -uo pipefail
OUT=${1:?usage: tools/proxy_ab.sh OUT TREE [TREE...]}
shift
[ $# -ge 1 ] || { echo "usage: tools/proxy_ab.sh OUT TREE [TREE...]" >&2; exit 2; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
HERE=$(cd "$(dirname "$0")/.." && pwd)
status=0
runs=() names=()

time_tree() {  # time_tree INDEX TREE NAME: the standard proxy run of TREE's build
  local dir="$OUT/$1-$3"
  if (cd "$2" && bash tools/mps_proxy.sh "$dir" >"$dir.log" 2>&1); then
    runs+=("$dir/bench_graph.json")
    names+=("$3")
  else
    echo "-- $3: the proxy run failed (see $dir.log)"
    status=1
  fi
}

i=0
for tree in "$@"; do
  name=$([ "$tree" = . ] && echo this || basename "$tree")
  i=$((i + 1))
  echo "-- $i: $tree ($(cd "$tree" && git rev-parse --short HEAD 2>/dev/null || echo 'no git'))"
  if ! (cd "$tree" && env MOE_A2A_PROFILE=0 MAX_JOBS="$(nproc)" python3 setup.py build_ext --inplace --force \
    >"$OUT/$i-$name-build.log" 2>&1); then
    echo "-- $name: build failed (see $OUT/$i-$name-build.log)"
    status=1
    continue
  fi
  mkdir -p "$OUT/$i-$name"
  time_tree "$i" "$tree" "$name"
done
mkdir -p "$OUT/$((i + 1))-base-again"
time_tree "$((i + 1))" "$1" base-again
if [ ${#runs[@]} -ge 2 ]; then
  names_csv=$(IFS=,; echo "${names[*]}")
  python3 "$HERE/benchmarks/compare_graph.py" "${runs[@]}" --names "$names_csv" --out "$OUT/compare.md"
fi
# The device tool brings back few files: compare.md stays loose, everything else goes into one archive.
(cd "$OUT" && tar czf results.tar.gz --remove-files $(ls | grep -v -e '^compare.md$' -e '^results.tar.gz$')) || true
exit $status
