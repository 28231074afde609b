#!/usr/bin/env bash
# Compile-check every GPU source (csrc/**/*.cu and tools/amd_asm_probe.cu) for both vendors,
# without a GPU and without torch:
#   nvidia : nvcc -arch=sm_90 (CUDA 13)
#   amd    : clang++-19 -x hip --offload-arch=gfx942 against Debian's HIP 5.2 headers and
#            rocPRIM 5.3 (/usr/include/rocprim). -nogpulib because no ROCm device libraries are
#            installed; -fgpu-rdc defers the device link that would need them. The objects are
#            thrown away: this checks that the code compiles, never run such a binary.
#            -DMOE_A2A_COMPILE_CHECK_ONLY lets include/moe_a2a/platform/runtime.h accept the
#            HIP 5.2 headers (real builds need ROCm >= 5.3).
#            rocPRIM 5.3's block_scan / block_reduce compile under clang-19 as they are: no extra
#            defines needed (checked with -Wall -Wextra too).
#
# Usage: tools/compile_check.sh [--nvidia | --amd] [file.cu ...]
#   no files: every csrc/**/*.cu plus tools/amd_asm_probe.cu
# Environment: NVCC, HIP_CLANG (compilers), JOBS (parallel compiles, default nproc),
#   EXTRA_NVCC_FLAGS, EXTRA_HIP_FLAGS (appended), MOE_A2A_CHECK_PROFILER=1 (also compile every
#   file with -DMOE_A2A_ENABLE_PROFILER=1).
# Prints one line per file and vendor; exits non-zero if any compile fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SELF="$ROOT/tools/$(basename "${BASH_SOURCE[0]}")"
cd "$ROOT"

# ---- worker: compile one (vendor, variant, file); called through xargs below ------------------
if [[ "${1:-}" == "--one" ]]; then
  outdir="$2" vendor="$3" variant="$4" src="$5"
  tag="$(echo "${vendor}_${variant}_${src}" | tr '/.' '__')"
  obj="$outdir/$tag.o" log="$outdir/$tag.log"
  defs=()
  [[ "$variant" == "profiler" ]] && defs+=(-DMOE_A2A_ENABLE_PROFILER=1)
  case "$vendor" in
    nvidia)
      # shellcheck disable=SC2206  # EXTRA_*_FLAGS: split on purpose
      cmd=("$NVCC" -arch=sm_90 -std=c++17 -I include -I csrc "${defs[@]}" ${EXTRA_NVCC_FLAGS:-} -c "$src" -o "$obj") ;;
    amd)
      # shellcheck disable=SC2206  # EXTRA_*_FLAGS: split on purpose
      cmd=("$HIP_CLANG" -x hip --offload-arch=gfx942 -std=c++17 -nogpulib -fgpu-rdc -DMOE_A2A_COMPILE_CHECK_ONLY
           -I include -I csrc -I/usr/include "${defs[@]}" ${EXTRA_HIP_FLAGS:-} -c "$src" -o "$obj") ;;
  esac
  start=$(date +%s.%N)
  if "${cmd[@]}" >"$log" 2>&1; then status=ok; else status=FAIL; fi
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  nwarn=$(grep -c -E 'warning( #[0-9]+-D)?:' "$log" || true)
  note=""
  [[ "$nwarn" != 0 ]] && note=", $nwarn warning line(s)"
  label="$vendor"
  [[ "$variant" != "default" ]] && label="$vendor+$variant"
  report="$outdir/$tag.report"
  {
    printf '  %-4s  %-15s  %-40s (%ss%s)\n' "$status" "$label" "$src" "$secs" "$note"
    if [[ "$status" == FAIL ]]; then
      echo "        command: ${cmd[*]}"
      sed -n '1,60p' "$log" | sed 's/^/        | /'
    elif [[ "$nwarn" != 0 ]]; then
      grep -E -A3 'warning( #[0-9]+-D)?:' "$log" | sed -n '1,20p' | sed 's/^/        | /'
    fi
  } >"$report"
  # One worker prints at a time so reports of parallel compiles do not interleave.
  if command -v flock >/dev/null; then
    flock "$outdir/print.lock" cat "$report"
  else
    cat "$report"
  fi
  [[ "$status" == ok ]] || echo "$vendor $variant $src" >>"$outdir/failures"
  exit 0
fi

# ---- driver -------------------------------------------------------------------------------------
vendors=(nvidia amd)
files=()
for arg in "$@"; do
  case "$arg" in
    --nvidia) vendors=(nvidia) ;;
    --amd) vendors=(amd) ;;
    -h|--help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$SELF"; exit 0 ;;
    *) files+=("$arg") ;;
  esac
done
if [[ ${#files[@]} -eq 0 ]]; then
  mapfile -t files < <(find csrc -name '*.cu' -type f 2>/dev/null | LC_ALL=C sort)
  files+=(tools/amd_asm_probe.cu)
fi

if [[ -z "${NVCC:-}" ]]; then
  if command -v nvcc >/dev/null; then NVCC=nvcc
  elif [[ -x /usr/local/cuda/bin/nvcc ]]; then NVCC=/usr/local/cuda/bin/nvcc
  else NVCC=nvcc; fi
fi
HIP_CLANG="${HIP_CLANG:-clang++-19}"
export NVCC HIP_CLANG

missing=0
for v in "${vendors[@]}"; do
  c="$NVCC"; [[ "$v" == amd ]] && c="$HIP_CLANG"
  if ! command -v "$c" >/dev/null; then
    echo "compile_check: $v compiler '$c' not found" >&2
    missing=1
  fi
done
if [[ " ${vendors[*]} " == *" amd "* && ! -f /usr/include/hip/hip_runtime.h ]]; then
  echo "compile_check: /usr/include/hip/hip_runtime.h missing (apt-get install libamdhip64-dev)" >&2
  missing=1
fi
if [[ " ${vendors[*]} " == *" amd "* && ! -d /usr/include/rocprim ]]; then
  echo "compile_check: /usr/include/rocprim missing (apt-get install librocprim-dev)" >&2
  missing=1
fi
[[ $missing == 0 ]] || exit 2

variants=(default)
[[ "${MOE_A2A_CHECK_PROFILER:-0}" == 1 ]] && variants+=(profiler)

outdir="$(mktemp -d "${TMPDIR:-/tmp}/moe_a2a_compile_check.XXXXXX")"
trap 'rm -rf "$outdir"' EXIT
jobs="${JOBS:-$(nproc 2>/dev/null || echo 2)}"

echo "compile_check: ${#files[@]} file(s) x ${vendors[*]} (${variants[*]}), $jobs in parallel"
echo "  nvidia: $("$NVCC" --version 2>/dev/null | grep -o 'release [0-9.]*' || echo '?')  amd: $("$HIP_CLANG" --version 2>/dev/null | head -1)" 
for f in "${files[@]}"; do
  [[ -f "$f" ]] || { echo "compile_check: no such file: $f" >&2; exit 2; }
done
# Slow compiles first would be nicer; vendor-major order keeps both cores busy either way.
for variant in "${variants[@]}"; do
  for v in "${vendors[@]}"; do
    for f in "${files[@]}"; do
      printf '%s\0%s\0%s\0' "$v" "$variant" "$f"
    done
  done
done | xargs -0 -n 3 -P "$jobs" bash "$SELF" --one "$outdir" || {
  echo "compile_check: a worker failed unexpectedly (xargs status $?)" >&2
  exit 2
}
if [[ -s "$outdir/failures" ]]; then
  echo "compile_check: $(wc -l <"$outdir/failures") compile(s) FAILED:"
  sed 's/^/  /' "$outdir/failures"
  exit 1
fi
echo "compile_check: all ${#files[@]} file(s) compile for ${vendors[*]}"
