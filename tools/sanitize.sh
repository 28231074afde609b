#!/usr/bin/env bash
# The GPU kernels under compute-sanitizer (issue 14, item 5), every rank of a world-2 torchrun job
# wrapped in a sanitizer of its own, once per tool; fails on any report.
#   tools/sanitize.sh OUT [TOOL[,TOOL...]]    TOOL: memcheck racecheck synccheck initcheck (default: all four)
# SANITIZE_RANKS=N runs a world of N instead (on one GPU, time-sliced like the tests: 3 checks a world that is
# not a power of two).
# What runs: tools/soak.py --profile sanitize (tests/python/gpu/soak_schedule.py): on five tiny
# AllToAlls (padded and packed, bf16 / fp16 / fp32, fp8 dispatch in both formats, an expert
# alignment, a 2-block grid) and one whose combine splits token groups into units, fused rounds, split rounds and forward rounds with both backward
# rounds (not with fp8), with unused slots, duplicate ids, a rank without tokens and every token
# to one expert; every round checked against the reference. With one GPU both ranks share it (MOE_A2A_TEST_ONE_GPU=1, set here by itself).
#
# Only moe_a2a's kernels are checked (--kernel-name kns=moe_a2a: all of them live in namespace
# moe_a2a; torch's own kernels are not ours to judge, and checking them makes the run far slower:
# unfiltered, initcheck did not finish these rounds in 300 s on an H100). MOE_A2A_SANITIZE_KERNELS=
# (empty) checks every kernel. COMPUTE_SANITIZER picks the binary.
#
# initcheck runs the initcheck profile: the same rounds with the fake experts on the host, forward
# rounds only. A kernel the filter skips does not mark what it writes as initialized, so every
# tensor a torch kernel wrote (the experts' output, a backward round's gradients) would be reported
# when combine reads it (seen on 1 x H100, 2026-11-23); with the experts' output copied in from the
# host, everything moe_a2a's kernels read was written by them, by a copy, or by the heap's memset.
#
# The peers write into this rank's heap through IPC, which this rank's sanitizer cannot see; the
# heap is zeroed when it is created (csrc/heap/symmetric_heap.cu), so initcheck counts it as
# initialized and judges only what this process's own kernels and torch's wrote.
# Options per tool (suppress_for): each with its reason; no finding is suppressed by address.
set -uo pipefail
OUT=${1:?usage: tools/sanitize.sh OUT_DIR [memcheck,racecheck,synccheck,initcheck]}
TOOLS=${2:-memcheck,racecheck,synccheck,initcheck}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.." || exit 2

source tools/no_multicast_env.sh  # also in the sanitized ranks
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
SANITIZER=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
[ -x "$SANITIZER" ] || { echo "sanitize: compute-sanitizer not found (set COMPUTE_SANITIZER)"; exit 2; }
NGPU=$(python3 -c 'import torch; print(torch.cuda.device_count())')
[ "$NGPU" -lt 2 ] && export MOE_A2A_TEST_ONE_GPU=1
KERNELS=${MOE_A2A_SANITIZE_KERNELS-kns=moe_a2a}
PER_TOOL_LIMIT_S=${SANITIZE_TOOL_LIMIT_S:-500}
RANKS=${SANITIZE_RANKS:-2}

suppress_for() {  # TOOL -> extra compute-sanitizer arguments, one documented reason each
  case $1 in
    # Copies are API calls, not kernels: the test copying a whole expert_x to the host (the padded
    # layout's slots past each expert's count are garbage by contract) and torch's own copies (its
    # sort on the GPU copies a buffer it allocated with torch.empty). Only kernels' reads are judged.
    initcheck) echo "--check-api-memory-access no" ;;
    *) ;;
  esac
}
profile_for() {  # TOOL -> the tools/soak.py profile (see above)
  if [ "$1" = initcheck ]; then echo initcheck; else echo sanitize; fi
}

status=0
for tool in ${TOOLS//,/ }; do
  log="$OUT/sanitize-$tool.log"
  t0=$SECONDS
  # A sanitized kernel runs many times slower, and a rank's kernels wait for the other rank's:
  # the AllToAll timeout is raised so that slowness is not taken for a missing peer.
  # shellcheck disable=SC2046
  timeout --signal=KILL "$PER_TOOL_LIMIT_S" torchrun --standalone --nproc-per-node="$RANKS" --no-python \
    "$SANITIZER" --tool "$tool" --error-exitcode 1 --print-limit 50 \
    ${KERNELS:+--kernel-name "$KERNELS"} $(suppress_for "$tool") \
    python3 tools/soak.py --profile "$(profile_for "$tool")" --timeout-s 120 >"$log" 2>&1
  rc=$?
  # One summary per rank; "ERROR SUMMARY: 0 errors" (and racecheck's hazard count) when clean.
  summaries=$(grep -hoE "(ERROR|RACECHECK) SUMMARY: [^=]*" "$log" | sort | uniq -c | tr -s ' ' | paste -sd ';' -)
  found=$(grep -cE "(ERROR|RACECHECK) SUMMARY: [1-9]" "$log")
  ran=$(grep -c "^SOAK_RESULT" "$log")
  verdict=clean
  if [ $rc -ne 0 ] || [ "$found" -ne 0 ] || [ "$ran" -ne 1 ]; then
    verdict=FAILED
    status=1
  fi
  echo "-- sanitize $tool: $verdict rc=$rc $((SECONDS - t0))s rounds-finished=$ran [$summaries] (log: $log)"
done
exit $status
