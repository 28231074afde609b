// Block-wide scan and reduce: rocPRIM on AMD, CUB on NVIDIA, behind one interface.
// Usage (BLOCK = threads per block, a compile-time constant):
//   using Scan = moe_a2a::BlockScan<int, 256>;
//   __shared__ typename Scan::TempStorage tmp;
//   int offset, total; Scan::exclusive_sum(tmp, value, offset, total);
// Each call ends with the block synchronised, so TempStorage can be reused directly.
#pragma once

#include "moe_a2a/platform/backend.h"

#if defined(MOE_A2A_GPU_COMPILER)

#if defined(MOE_A2A_HIP)
#include <rocprim/block/block_reduce.hpp>
#include <rocprim/block/block_scan.hpp>
#else
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#endif

namespace moe_a2a {

template <typename T, int BLOCK>
struct BlockScan {
#if defined(MOE_A2A_HIP)
  using Impl = rocprim::block_scan<T, BLOCK>;
  using TempStorage = typename Impl::storage_type;
  __device__ static void exclusive_sum(TempStorage& tmp, T value, T& out, T& total) {
    Impl().exclusive_scan(value, out, T(0), total, tmp, rocprim::plus<T>());
    __syncthreads();
  }
#else
  using Impl = cub::BlockScan<T, BLOCK>;
  using TempStorage = typename Impl::TempStorage;
  __device__ static void exclusive_sum(TempStorage& tmp, T value, T& out, T& total) {
    Impl(tmp).ExclusiveSum(value, out, total);
    __syncthreads();
  }
#endif
};

template <typename T, int BLOCK>
struct BlockReduce {
#if defined(MOE_A2A_HIP)
  using Impl = rocprim::block_reduce<T, BLOCK>;
  using TempStorage = typename Impl::storage_type;
  // Result is valid in thread 0 only.
  __device__ static T sum(TempStorage& tmp, T value) {
    T out;
    Impl().reduce(value, out, tmp, rocprim::plus<T>());
    __syncthreads();
    return out;
  }
  __device__ static T max(TempStorage& tmp, T value) {
    T out;
    Impl().reduce(value, out, tmp, rocprim::maximum<T>());
    __syncthreads();
    return out;
  }
#else
  using Impl = cub::BlockReduce<T, BLOCK>;
  using TempStorage = typename Impl::TempStorage;
  __device__ static T sum(TempStorage& tmp, T value) {
    T out = Impl(tmp).Sum(value);
    __syncthreads();
    return out;
  }
  __device__ static T max(TempStorage& tmp, T value) {
    T out = Impl(tmp).Reduce(value, ::cuda::maximum<>{});
    __syncthreads();
    return out;
  }
#endif
};

}  // namespace moe_a2a

#endif
