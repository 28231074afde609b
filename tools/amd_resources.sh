#!/usr/bin/env bash
# What each kernel costs on an MI300X, read from the compiler without an AMD GPU: compiles GPU sources for gfx942
# (Debian's clang-19, device code only, as tools/check_amd_asm.sh does) with LLVM's kernel-resource-usage remarks and
# prints one line a kernel: vector registers (VGPRs, and AGPRs, which gfx942 also spills into), VGPR spills, scratch
# bytes a lane (private memory: spills, and any kernel argument copied out of the kernarg segment), LDS bytes a block
# and waves a SIMD. Where NVIDIA's ptxas reports no stack frame for a kernel that uses scratch here, the AMD build
# pays something NVIDIA's does not (docs/design/architecture.md, "MI300X: kernel resources").
#
# Usage: tools/amd_resources.sh [--max-scratch BYTES] [file.cu ...]
#   files: default the round's kernels, csrc/ep/{dispatch,combine,combine_backward}.cu
#   --max-scratch: exit 1 if a kernel uses more scratch a lane than BYTES (CI: 64; the kernels' arguments copied into
#   scratch again would show as 400-600)
# Environment: HIP_CLANG (default clang++-19).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
HIP_CLANG="${HIP_CLANG:-clang++-19}"
command -v "$HIP_CLANG" > /dev/null || { echo "amd_resources: '$HIP_CLANG' not found (apt-get install clang-19)" >&2; exit 2; }
max_scratch=""
if [ "${1:-}" = --max-scratch ]; then
  max_scratch=${2:?amd_resources: --max-scratch needs a number of bytes}
  shift 2
fi
[ $# -gt 0 ] || set -- csrc/ep/dispatch.cu csrc/ep/combine.cu csrc/ep/combine_backward.cu
over=0

printf "%-70s %5s %5s %6s %8s %6s %6s\n" kernel VGPRs AGPRs spills scratch LDS waves
remarks=$(mktemp "${TMPDIR:-/tmp}/moe_a2a_resources.XXXXXX")
trap 'rm -f "$remarks"' EXIT
for src in "$@"; do
  if ! "$HIP_CLANG" -x hip --offload-arch=gfx942 -std=c++17 -nogpulib --cuda-device-only -O3 -S \
    -DMOE_A2A_COMPILE_CHECK_ONLY -I include -I csrc -I/usr/include "$src" -o /dev/null \
    -Rpass-analysis=kernel-resource-usage > "$remarks" 2>&1; then
    grep -E "error" "$remarks" | head -20 >&2
    echo "amd_resources: $src does not compile for gfx942" >&2
    exit 1
  fi
  sed -nE 's/.*remark: +(Function Name|VGPRs|AGPRs|VGPRs Spill|ScratchSize \[bytes\/lane\]|LDS Size \[bytes\/block\]|Occupancy \[waves\/SIMD\]): ([^ ]+) .*/\1=\2/p' \
    "$remarks" | awk -F= '
        $1 == "Function Name" { if (name != "") emit(); name = $2; delete v; next }
        { v[$1] = $2 }
        function emit() { print name, v["VGPRs"], v["AGPRs"], v["VGPRs Spill"], v["ScratchSize [bytes/lane]"],
                                v["LDS Size [bytes/block]"], v["Occupancy [waves/SIMD]"] }
        END { if (name != "") emit() }' \
    | while read -r name vgpr agpr spill scratch lds waves; do
        short=$(echo "$name" | c++filt | sed -E 's/moe_a2a:://g; s/\(anonymous namespace\):://g; s/^void //; s/>\(.*/>/')
        printf "%-70s %5s %5s %6s %8s %6s %6s\n" "${short:0:70}" "$vgpr" "$agpr" "$spill" "$scratch" "$lds" "$waves"
      done > "$remarks.table"
  cat "$remarks.table"
  if [ -n "$max_scratch" ]; then
    over=$((over + $(awk -v m="$max_scratch" '$(NF-2) + 0 > m' "$remarks.table" | wc -l)))
  fi
done
rm -f "$remarks.table"
if [ "$over" -gt 0 ]; then
  echo "amd_resources: $over kernel(s) use more than $max_scratch bytes of scratch a lane on gfx942" >&2
  exit 1
fi
