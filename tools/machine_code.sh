#!/usr/bin/env bash
# The machine code of every GPU source, hashed: to show, with no GPU, that a change (a file split, a rename, a
# comment) leaves every kernel as it was, byte for byte, on both vendors. Compiles each csrc/**/*.cu for sm_90 (nvcc
# -cubin) and for gfx942 (clang-19, device assembly, less its .file and .ident lines), each with and without the
# profiler (MOE_A2A_ENABLE_PROFILER), and writes one line a (source, build): its hash, the source, the build.
# No -lineinfo: a line that moved changes no hash (unless device code prints __LINE__).
#
# Usage: tools/machine_code.sh OUT.md5 [file.cu ...]      (default: every csrc/**/*.cu)
#   bash tools/machine_code.sh /tmp/before.md5; (change); bash tools/machine_code.sh /tmp/after.md5
#   diff /tmp/before.md5 /tmp/after.md5 && echo "the same machine code"
# Environment: NVCC, HIP_CLANG (compilers), JOBS (parallel compiles, default nproc). About 2 minutes on 2 cores.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
out=${1:?usage: tools/machine_code.sh OUT.md5 [file.cu ...]}
shift
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
HIP_CLANG="${HIP_CLANG:-clang++-19}"
JOBS="${JOBS:-$(nproc)}"
[ -x "$NVCC" ] || { echo "machine_code: nvcc not found (set NVCC)" >&2; exit 2; }
command -v "$HIP_CLANG" > /dev/null || { echo "machine_code: '$HIP_CLANG' not found (set HIP_CLANG)" >&2; exit 2; }
if [ $# -eq 0 ]; then mapfile -t files < <(find csrc -name '*.cu' -type f | LC_ALL=C sort); else files=("$@"); fi

work="$(mktemp -d "${TMPDIR:-/tmp}/moe_a2a_machine_code.XXXXXX")"
out=$(realpath -m "$out")
# nvcc puts the source's full path into an id in the machine code, so every tree is compiled from one fixed place, a
# copy of its csrc and include, one run at a time (flock). clang derives its cuid from the output path: -cuid fixes it.
tree="${TMPDIR:-/tmp}/moe_a2a_machine_code.tree"
exec 9> "$tree.lock"
flock 9
trap 'rm -rf "$work" "$tree"' EXIT
rm -rf "$tree"
mkdir -p "$tree"
cp -r csrc include "$tree/"
cd "$tree"

# one SOURCE VENDOR BUILD: compiles one (source, build) to $work/NAME (NAME: both, and the compiler's messages in
# $work/NAME.log); the file is left out where the compile failed.
name_of() { echo "$work/$(echo "$1" | tr / _).$2.$3"; }
one() {
  local src=$1 vendor=$2 build=$3 defs=() name
  [ "$build" = profiler ] && defs=(-DMOE_A2A_ENABLE_PROFILER)
  name=$(name_of "$@")
  case $vendor in
    sm_90) "$NVCC" -arch=sm_90 -std=c++17 -O3 -cubin -I include -I csrc "${defs[@]}" -o "$name.tmp" "$src" ;;
    gfx942) "$HIP_CLANG" -x hip --offload-arch=gfx942 -nogpulib --cuda-device-only -cuid=machine_code -O3 -S -std=c++17 \
      -DMOE_A2A_COMPILE_CHECK_ONLY -I include -I csrc "${defs[@]}" -o "$name.tmp" "$src" ;;
  esac > "$name.log" 2>&1 || return 1
  if [ "$vendor" = gfx942 ]; then grep -v '^\s*\.file\|\.ident' "$name.tmp" > "$name"; else mv "$name.tmp" "$name"; fi
}

units=()
for src in "${files[@]}"; do
  for vendor in sm_90 gfx942; do
    for build in plain profiler; do units+=("$src $vendor $build"); done
  done
done
for unit in "${units[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  # shellcheck disable=SC2086  # a unit is three words
  one $unit &
done
wait
failed=0
for unit in "${units[@]}"; do
  # shellcheck disable=SC2086
  name=$(name_of $unit)
  if [ ! -f "$name" ]; then
    echo "machine_code: $unit did not compile:" >&2
    sed 's/^/  | /' "$name.log" >&2
    failed=1
  fi
done
[ $failed = 0 ] || exit 1
for unit in "${units[@]}"; do
  # shellcheck disable=SC2086
  echo "$(md5sum < "$(name_of $unit)" | cut -c1-32)  $unit"
done > "$out"
echo "machine_code: ${#files[@]} source(s) x {sm_90, gfx942} x {plain, profiler} -> $out"
