#!/usr/bin/env bash
# Builds source trees in place, all at once, for a device call that times or tests several of them:
#   tools/build_trees.sh LOGDIR TREE[:hooks|:profiler] [TREE[:hooks|:profiler]...]
# TREE is a folder holding a version of this repository (on the device machine, one carried there:
# CONTRIBUTING.md, "Timing a kernel change"). TREE:hooks builds it with MOE_A2A_TEST_HOOKS=1, what
# TREE/tools/gpu_run.sh OUT tests needs; TREE:profiler with MOE_A2A_PROFILE=1, for a trace
# (bench_all2all.py --trace); the others with neither. The cores are
# shared among the builds. Each build's log is LOGDIR/build-<tree's folder name>.log, and a line
# "build <name> rc=N" a tree goes to stdout. Then tools/graph_ab.sh with AB_BUILT=1, or
# TREE/tools/gpu_run.sh OUT tests, use the trees as built. BUILD_TIMEOUT (seconds, default 300)
# bounds each build. Exit status: non-zero if any build failed.
set -uo pipefail
source "$(cd "$(dirname "$0")" && pwd)/no_multicast_env.sh"  # every process a tool starts, builds too
source "$(cd "$(dirname "$0")" && pwd)/bounded.sh"  # a timed-out build's compilers go with it
usage="usage: tools/build_trees.sh LOGDIR TREE[:hooks|:profiler] [TREE[:hooks|:profiler]...]"
LOGDIR=${1:?$usage}
shift
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
mkdir -p "$LOGDIR"
jobs=$(($(nproc) / $#))
[ "$jobs" -ge 1 ] || jobs=1
names=() pids=()
for spec in "$@"; do
  case $spec in
    *:hooks) tree=${spec%:hooks} hooks=1 profile=0 ;;
    *:profiler) tree=${spec%:profiler} hooks=0 profile=1 ;;
    *) tree=$spec hooks=0 profile=0 ;;
  esac
  name=$(basename "$(cd "$tree" && pwd)")
  (cd "$tree" && bounded "${BUILD_TIMEOUT:-300}" env MOE_A2A_PROFILE="$profile" MOE_A2A_TEST_HOOKS="$hooks" MAX_JOBS="$jobs" \
    python3 setup.py build_ext --inplace --force >"$LOGDIR/build-$name.log" 2>&1) &
  names+=("$name") pids+=($!)
done
status=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"
  rc=$?
  echo "build ${names[$i]} rc=$rc"
  [ "$rc" = 0 ] || status=1
done
exit $status
