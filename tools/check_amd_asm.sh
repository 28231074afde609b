#!/usr/bin/env bash
# Keeps the AMD memory model honest without an AMD GPU: compiles tools/amd_asm_probe.cu (one
# extern "C" kernel per primitive of include/moe_a2a/platform/sync.h, plus device.h's
# wall_clock) to gfx942 assembly and checks, kernel by kernel, that each primitive became the
# instruction sequence the gfx942 memory model requires (LLVM AMDGPUUsage, "Memory Model
# GFX942"):
#   system-scope acquire load : global_load ... sc0 sc1 ; s_waitcnt vmcnt(0) ; buffer_inv sc0 sc1
#   system-scope release store: buffer_wbl2 sc0 sc1 ; global_store ... sc0 sc1
#   system-scope relaxed ld/st: global_load/global_store ... sc0 sc1, no cache maintenance
#   system-scope atomics      : ... sc1 (system scope), with buffer_wbl2 / buffer_inv for
#                               release / acquire; agent-scope atomics carry no sc1
#   fence_acq_rel_sys         : buffer_wbl2 sc0 sc1 ; buffer_inv sc0 sc1
#   wall_clock                : s_memrealtime
# It also fails when sync.h gains a primitive that has no probe kernel, or the probe gains a
# kernel that has no expectation here.
#
# Usage: tools/check_amd_asm.sh            (ASM_OUT=path keeps the generated assembly)
# Environment: HIP_CLANG (default clang++-19).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
HIP_CLANG="${HIP_CLANG:-clang++-19}"
PROBE=tools/amd_asm_probe.cu

command -v "$HIP_CLANG" >/dev/null || { echo "check_amd_asm: '$HIP_CLANG' not found (apt-get install clang-19)" >&2; exit 2; }
[[ -f /usr/include/hip/hip_runtime.h ]] || { echo "check_amd_asm: HIP headers missing (apt-get install libamdhip64-dev)" >&2; exit 2; }

work="$(mktemp -d "${TMPDIR:-/tmp}/moe_a2a_asm.XXXXXX")"
trap 'rm -rf "$work"' EXIT
asm="$work/probe.s"

cmd=("$HIP_CLANG" -x hip --offload-arch=gfx942 -nogpulib --cuda-device-only -O3 -S -std=c++17
     -DMOE_A2A_COMPILE_CHECK_ONLY -I include "$PROBE" -o "$asm")
if ! "${cmd[@]}" 2>"$work/log"; then
  echo "check_amd_asm: FAILED to compile the probe:"
  echo "  ${cmd[*]}"
  sed 's/^/  | /' "$work/log"
  exit 1
fi
[[ -n "${ASM_OUT:-}" ]] && cp "$asm" "$ASM_OUT"
echo "check_amd_asm: $("$HIP_CLANG" --version | head -1), gfx942, $PROBE"

failures=0
fail() {
  echo "  FAIL  $1: $2"
  failures=$((failures + 1))
}

# Instructions of one kernel: from its label to the end of its code (.Lfunc_end, or the
# kernel descriptor's .section), with comments, directives and blank lines dropped and
# whitespace trimmed. Branch labels (.LBB..:) stay.
body() {
  awk -v k="$1" '
    $0 == k ":" || index($0, k ":") == 1 { on = 1; next }
    on && (/^\.Lfunc_end/ || /^[ \t]*\.(section|amdhsa_kernel|end_amdhsa_kernel)([ \t]|$)/) { exit }
    on { print }
  ' "$asm" | sed -e 's/;.*$//' -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' | grep -v -E '^(\.[A-Za-z0-9_.]+([[:space:]].*)?)?$' || true
}

declare -A checked=()

# expect KERNEL PATTERN... : the extended regexps match lines of KERNEL in this order.
expect() {
  local k="$1"; shift
  checked[$k]=1
  local b; b="$(body "$k")"
  if [[ -z "$b" ]]; then fail "$k" "kernel not found in the assembly"; return; fi
  local prev=0 pat n
  for pat in "$@"; do
    n="$(tail -n +"$((prev + 1))" <<<"$b" | grep -n -m1 -E -- "$pat" | cut -d: -f1 || true)"
    if [[ -z "$n" ]]; then
      if grep -q -E -- "$pat" <<<"$b"; then
        fail "$k" "'$pat' is there but out of order (expected in order: $*)"
      else
        fail "$k" "no instruction matches '$pat' (expected in order: $*)"
      fi
      sed 's/^/        | /' <<<"$b"
      return
    fi
    prev=$((prev + n))
  done
  echo "  ok    $k"
}

# forbid KERNEL PATTERN... : no line of KERNEL matches any of the extended regexps.
forbid() {
  local k="$1"; shift
  local b; b="$(body "$k")"
  local pat
  for pat in "$@"; do
    if grep -q -E -- "$pat" <<<"$b"; then
      fail "$k" "unexpected instruction matching '$pat': $(grep -m1 -E -- "$pat" <<<"$b")"
    fi
  done
}

# every KERNEL SELECT REQUIRE : each line matching SELECT also matches REQUIRE.
every() {
  local k="$1" sel="$2" req="$3"
  local bad; bad="$(body "$k" | grep -E -- "$sel" | grep -v -E -- "$req" || true)"
  [[ -z "$bad" ]] || fail "$k" "'$sel' without '$req': $(head -1 <<<"$bad")"
}

SYS='\bsc0 sc1\b'
INV_SYS='^buffer_inv sc0 sc1$'
WB_SYS='^buffer_wbl2 sc0 sc1$'
WAIT_VM='^s_waitcnt\b.*\bvmcnt\(0\)'
CACHE_OPS='^buffer_(inv|wbl2)\b'

# --- loads ---------------------------------------------------------------------------------------
expect probe_ld_acquire_sys_u32 "^global_load_dword\b.*$SYS" "$WAIT_VM" "$INV_SYS"
expect probe_ld_acquire_sys_u64 "^global_load_dwordx2\b.*$SYS" "$WAIT_VM" "$INV_SYS"
expect probe_ld_relaxed_sys_u32 "^global_load_dword\b.*$SYS"
forbid probe_ld_relaxed_sys_u32 "$CACHE_OPS"
expect probe_ld_relaxed_sys_u64 "^global_load_dwordx2\b.*$SYS"
forbid probe_ld_relaxed_sys_u64 "$CACHE_OPS"
# a spin's look (kPollAcquires is false on AMD): relaxed, no invalidation a look
expect probe_ld_poll_sys "^global_load_dwordx2\b.*$SYS"
forbid probe_ld_poll_sys "$CACHE_OPS"
# --- stores --------------------------------------------------------------------------------------
expect probe_st_release_sys_u32 "$WB_SYS" "^global_store_dword\b.*$SYS"
expect probe_st_release_sys_u64 "$WB_SYS" "^global_store_dwordx2\b.*$SYS"
expect probe_st_relaxed_sys_u32 "^global_store_dword\b.*$SYS"
forbid probe_st_relaxed_sys_u32 "$CACHE_OPS"
expect probe_st_relaxed_sys_u64 "^global_store_dwordx2\b.*$SYS"
forbid probe_st_relaxed_sys_u64 "$CACHE_OPS"
# --- atomics (sc1 = system scope on an atomic; sc0 there only asks for the old value) ----------
expect probe_atomic_add_release_sys_u32 "$WB_SYS" '^global_atomic_add\b.*\bsc1\b'
expect probe_atomic_add_release_sys_u64 "$WB_SYS" '^global_atomic_add_x2\b.*\bsc1\b'
expect probe_atomic_add_relaxed_gpu_u32 '^global_atomic_add\b'
forbid probe_atomic_add_relaxed_gpu_u32 '^global_atomic_add.*\bsc1\b' "$CACHE_OPS"
expect probe_atomic_add_relaxed_gpu_u64 '^global_atomic_add_x2\b'
forbid probe_atomic_add_relaxed_gpu_u64 '^global_atomic_add.*\bsc1\b' "$CACHE_OPS"
# A block-scope counter in shared memory: one LDS atomic, nothing that touches the caches.
expect probe_atomic_add_relaxed_block '^ds_add_rtn_u32\b'
forbid probe_atomic_add_relaxed_block '^global_atomic' "$CACHE_OPS"
expect probe_atomic_or_relaxed_block '^ds_or_b32\b'
forbid probe_atomic_or_relaxed_block '^global_atomic' "$CACHE_OPS"
expect probe_atomic_cas_sys_u32 "$WB_SYS" '^global_atomic_cmpswap\b.*\bsc1\b' "$WAIT_VM" "$INV_SYS"
expect probe_atomic_cas_relaxed_gpu_u64 '^global_atomic_cmpswap_x2\b'
forbid probe_atomic_cas_relaxed_gpu_u64 '^global_atomic_cmpswap.*\bsc1\b' "$CACHE_OPS"
# --- fences --------------------------------------------------------------------------------------
expect probe_fence_acq_rel_sys "$WB_SYS" "$INV_SYS"
expect probe_fence_acq_rel_gpu '^buffer_wbl2 sc1$' '^buffer_inv sc1$'
forbid probe_fence_acq_rel_gpu "$WB_SYS" "$INV_SYS"
# --- bounded wait: relaxed polling (every load system-coherent), timer, one final acquire -------
expect probe_wait_until_at_least_sys '^s_memrealtime\b' "^global_load_dwordx2\b.*$SYS" "$WAIT_VM" "$INV_SYS"
every probe_wait_until_at_least_sys '^global_load' "$SYS"
# --- timer ---------------------------------------------------------------------------------------
expect probe_wall_clock '^s_memrealtime\b'

# --- coverage ------------------------------------------------------------------------------------
# Every kernel of the probe has expectations above.
mapfile -t kernels < <(grep -oE 'extern "C" __global__ void [A-Za-z0-9_]+' "$PROBE" | awk '{print $NF}' | sort -u)
for k in "${kernels[@]}"; do
  [[ -n "${checked[$k]:-}" ]] || fail "$k" "probe kernel has no expectation in tools/check_amd_asm.sh"
done
# Every device primitive of sync.h (and wall_clock) has a probe kernel.
mapfile -t prims < <(grep -E 'MOE_A2A_DEVICE' include/moe_a2a/platform/sync.h |
                     grep -oE '\b[a-z][a-z0-9_]*_(sys|gpu|agent|cta|block|wave)[[:space:]]*\(' |
                     tr -d '( \t' | sort -u)
prims+=(wall_clock)
for p in "${prims[@]}"; do
  found=0
  for k in "${kernels[@]}"; do
    [[ "$k" =~ ^probe_${p}(_u32|_u64|_i32|_i64|_f32)?$ ]] && found=1
  done
  [[ $found == 1 ]] || fail "$p" "primitive in sync.h has no probe kernel in $PROBE"
done

if [[ $failures -ne 0 ]]; then
  echo "check_amd_asm: $failures check(s) FAILED"
  exit 1
fi
echo "check_amd_asm: ${#kernels[@]} kernels, ${#prims[@]} primitives: gfx942 assembly as the memory model requires"
