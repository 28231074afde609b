#!/usr/bin/env bash
# The start that every device-call driver (docs/results/*/callN-driver.sh) shares, sourced first:
#   source tools/device_call.sh
# on the device machine, from the checkout's root, with OUT set (the run tool's folder). It sets -u, the
# no-multicast environment (tools/no_multicast_env.sh) and unbuffered Python output; defines `log MESSAGE`,
# a line with the seconds since this file was sourced, to stdout and $OUT/driver.log; writes the machine's
# GPUs and driver to $OUT/driver.log; makes L=$OUT/logs for the call's logs; and defines
# `ab NAME SECONDS BASE VARIANT...`, one tools/graph_ab.sh A/B (its AB_* settings from the environment),
# `bench NAME SECONDS SCRIPT ARGS...`, one benchmark run under torchrun, `soak NAME RANKS SECONDS ARGS...`, one
# tools/soak.py run, and `bounded SECONDS CMD...`
# (tools/bounded.sh), which bounds a step and everything it started. The drivers that ran before these were written
# spell their lines out, as they ran.
set -u
: "${OUT:?tools/device_call.sh: OUT is not set (the run tool sets it)}"
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/no_multicast_env.sh"
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/bounded.sh"
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a "$OUT/driver.log"; }
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$OUT/driver.log"
else
  echo "no nvidia-smi on this machine" >> "$OUT/driver.log"
fi
L=$OUT/logs
mkdir -p "$L"

# ab NAME SECONDS BASE VARIANT...: tools/graph_ab.sh $OUT/NAME BASE VARIANT..., bounded by SECONDS, its output in
# $L/NAME.log; logs "ab NAME rc=N" and copies its compare.md to $OUT/compare-NAME.md, which the device tool
# brings back loose (put $OUT/NAME in the call's archive). Returns graph_ab's status.
ab() {
  local name=$1 seconds=$2 rc
  bounded "$seconds" bash tools/graph_ab.sh "$OUT/$name" "${@:3}" > "$L/$name.log" 2>&1
  rc=$?
  log "ab $name rc=$rc"
  cp "$OUT/$name/compare.md" "$OUT/compare-$name.md" 2> /dev/null
  return $rc
}

# bench NAME SECONDS SCRIPT ARGS...: SCRIPT (e.g. benchmarks/bench_graph.py) with ARGS and --out $OUT/NAME, one
# torchrun rank a GPU (BENCH_NPROC to choose), importing the package of the tree BENCH_TREE (default this checkout,
# built already), bounded by SECONDS; its output in $L/NAME.log; logs "NAME rc=N". Returns torchrun's status.
bench() {
  local name=$1 seconds=$2 rc nproc
  nproc=${BENCH_NPROC:-$(nvidia-smi -L 2> /dev/null | wc -l)}
  PYTHONPATH="$(cd "${BENCH_TREE:-.}" && pwd)/python" bounded "$seconds" torchrun --nproc-per-node="$nproc" "${@:3}" \
    --out "$OUT/$name" > "$L/$name.log" 2>&1
  rc=$?
  log "$name rc=$rc"
  return $rc
}

# soak NAME RANKS SECONDS ARGS...: tools/soak.py ARGS under torchrun with RANKS ranks (more ranks than GPUs: every rank
# on GPU 0, time-sliced, MOE_A2A_TEST_ONE_GPU=1: correctness only), bounded by SECONDS; its output in $L/NAME.log;
# logs "soak NAME rc=N" and keeps its result line and a failure's lines (the explanation of a failed out check among
# them), once each without the rank prefixes, in $OUT/NAME.txt, which the device tool brings back loose. Returns
# torchrun's status.
soak() {
  local name=$1 ranks=$2 seconds=$3 rc one=0
  [ "$ranks" -gt "$(nvidia-smi -L 2> /dev/null | wc -l)" ] && one=1
  MOE_A2A_TEST_ONE_GPU=$one bounded "$seconds" torchrun --nproc-per-node="$ranks" tools/soak.py "${@:4}" \
    > "$L/$name.log" 2>&1
  rc=$?
  log "soak $name rc=$rc"
  sed -E 's/^\[rank[0-9]+\]: //' "$L/$name.log" \
    | grep -E "^SOAK_RESULT|^stopping|rounds failed|^  out on the host|^  token [0-9]+ \(|Error" \
    | awk '!seen[$0]++' | head -60 > "$OUT/$name.txt"
  return $rc
}
