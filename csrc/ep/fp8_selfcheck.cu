#include "fp8_rows.cuh"
#include "fp8_selfcheck.h"

namespace moe_a2a {
namespace {

constexpr int kCheckBlock = 256;
constexpr uint64_t kPatterns = uint64_t{1} << 32;

MOE_A2A_DEVICE bool is_nan_code(uint32_t c, Fp8Format f) {
  return f == Fp8Format::kE4M3Fnuz ? c == 0x80u : (c & 0x7fu) == 0x7fu;
}
MOE_A2A_DEVICE bool is_nan(float x) { return x != x; }

// The running maxima a fold starts from: zero, ordinary, the format maxima, inf, NaN.
MOE_A2A_DEVICE float running_max(int i) {
  constexpr uint32_t kBits[] = {0x00000000u, 0x3fc00000u, 0x43e00000u, 0x43700000u, 0x7f800000u, 0x7fc00000u};
  return bits_float(kBits[i]);
}
inline constexpr int kRunningMaxima = 6;

MOE_A2A_DEVICE void note_mismatch(uint64_t* count, uint64_t* first, uint32_t bits) {
  atomicAdd(reinterpret_cast<unsigned long long*>(count), 1ull);
  atomicMin(reinterpret_cast<unsigned long long*>(first), static_cast<unsigned long long>(bits));
}

template <Fp8Format kFmt>
__global__ void __launch_bounds__(kCheckBlock) fp8_device_check_kernel(Fp8CheckResult* result) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x * 4;
  for (uint64_t base = (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4; base < kPatterns;
       base += stride) {
    float v[4];
    for (int i = 0; i < 4; ++i) v[i] = bits_float(static_cast<uint32_t>(base + i));
    const uint32_t word = quantize4<kFmt>(v, 1.0f);
    for (int i = 0; i < 4; ++i) {
      const uint32_t got = (word >> (8 * i)) & 0xffu, want = fp8_encode(v[i], kFmt);
      if (got != want && !(is_nan_code(got, kFmt) && is_nan_code(want, kFmt)))
        note_mismatch(&result->encode_mismatches, &result->first_bad_encode, static_cast<uint32_t>(base + i));
      for (int r = 0; r < kRunningMaxima; ++r) {
        const float a = amax_fold_device(running_max(r), v[i]), b = amax_fold(running_max(r), v[i]);
        if (float_bits(a) != float_bits(b) && !(is_nan(a) && is_nan(b)))
          note_mismatch(&result->amax_mismatches, &result->first_bad_amax, static_cast<uint32_t>(base + i));
      }
    }
  }
}

}  // namespace

void launch_fp8_device_check(Fp8Format format, Fp8CheckResult* result, hipStream_t stream) {
  const dim3 grid(4096), block(kCheckBlock);
  if (format == Fp8Format::kE4M3Fnuz) {
    fp8_device_check_kernel<Fp8Format::kE4M3Fnuz><<<grid, block, 0, stream>>>(result);
  } else {
    fp8_device_check_kernel<Fp8Format::kE4M3Fn><<<grid, block, 0, stream>>>(result);
  }
  MOE_A2A_GPU_CHECK(hipGetLastError());
}

}  // namespace moe_a2a
