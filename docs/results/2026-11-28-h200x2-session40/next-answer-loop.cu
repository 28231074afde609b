// Prepared in session 40 for the next call (next-driver.sh builds and runs it on GPU 0; alone, on any NVIDIA GPU of
// sm_90: nvcc -arch=sm_90 -O3 -std=c++17 -o answer-loop next-answer-loop.cu && ./answer-loop). The question:
// what holds the backward of combine's answers at 2.1-2.7 TB/s (call 4's traces at 512 tokens, 2 x H200) where
// torch.mul moves the same rows at 3.4-4.05 TB/s. Standalone, no moe_a2a code: the answer loop's memory pattern
// alone, as answer_row_chunks runs it (csrc/ep/combine_backward.cu, main 30df1b9), with knobs:
//   - waves an SM: the kernel runs 8 (one block of 256 threads a SM, ~220 registers); here 1, 2 or 4 blocks a SM;
//   - bytes in flight a wave: kUnroll vectors of 16 bytes a lane a row (the kernel: 4, so a chunk is 2 KB), for the
//     gradient's chunk and each of kInFlight = 4 rows of y at once (the kernel's kGradsInFlight);
//   - where y's rows lie: random rows of the buffer (the kernel: each (token, k)'s position) or consecutive;
//   - the grad y stores on or off;
//   - the loads as cp.async into shared memory, 2 or 4 tasks in flight a wave (answers_async).
// A task is one chunk of one token's row: load the gradient's chunk and 4 rows' chunks of y, write 4 chunks of
// grad y = w * grad, sum each row's dot product <grad, y> (kept in a register, written once at the end).
// The answer: bytes moved (y read + grad read + grad y written) over the median time of 20 launches, TB/s, next to a
// plain scaled copy of y into grad y over the same bytes (what torch.mul does in bench_moe_layer's hbm-y).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#define CHECK(x)                                                                    \
  do {                                                                              \
    cudaError_t e = (x);                                                            \
    if (e != cudaSuccess) {                                                         \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

constexpr int kHidden = 7168;            // DeepSeek-V3
constexpr int kVecs = kHidden * 2 / 16;  // bf16 row in 16-byte vectors: 896
constexpr int kWave = 32;
constexpr int kInFlight = 4;                // rows of y a task loads at once, all of a token's k here
constexpr int kTokens = 1024;               // gradient rows
constexpr int kRows = kTokens * kInFlight;  // y rows: 4096, 58.7 MB (512 tokens a rank at world 2, top-8)

__device__ __forceinline__ float bf_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf_hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }
__device__ __forceinline__ uint32_t bf_pack(float a, float b) {
  return (__float_as_uint(a) >> 16) | (__float_as_uint(b) & 0xffff0000u);
}
__device__ __forceinline__ float dot4(uint4 a, uint4 b) {
  return bf_lo(a.x) * bf_lo(b.x) + bf_hi(a.x) * bf_hi(b.x) + bf_lo(a.y) * bf_lo(b.y) + bf_hi(a.y) * bf_hi(b.y) +
         bf_lo(a.z) * bf_lo(b.z) + bf_hi(a.z) * bf_hi(b.z) + bf_lo(a.w) * bf_lo(b.w) + bf_hi(a.w) * bf_hi(b.w);
}
__device__ __forceinline__ uint4 scale4(float w, uint4 a) {
  return uint4{bf_pack(w * bf_lo(a.x), w * bf_hi(a.x)), bf_pack(w * bf_lo(a.y), w * bf_hi(a.y)),
               bf_pack(w * bf_lo(a.z), w * bf_hi(a.z)), bf_pack(w * bf_lo(a.w), w * bf_hi(a.w))};
}

// Tasks (token, chunk), wave-strided over the grid as the kernel's blocks stride their groups' tasks.
template <int kUnroll, bool kStore>
__global__ void __launch_bounds__(256)
    answers(const uint4* __restrict__ grad, const uint4* __restrict__ y, uint4* __restrict__ grad_y,
            const int* __restrict__ pos, const float* __restrict__ weight, float* __restrict__ dots) {
  constexpr int kChunkVecs = kWave * kUnroll;
  constexpr int kChunks = (kVecs + kChunkVecs - 1) / kChunkVecs;
  const int lane = threadIdx.x % kWave;
  const int wave = (blockIdx.x * blockDim.x + threadIdx.x) / kWave;
  const int waves = gridDim.x * blockDim.x / kWave;
  float sum = 0.0f;
  for (int task = wave; task < kTokens * kChunks; task += waves) {
    const int t = task / kChunks, chunk = task % kChunks;
    size_t row[kInFlight];
    float w[kInFlight];
#pragma unroll
    for (int q = 0; q < kInFlight; ++q) {
      row[q] = static_cast<size_t>(pos[t * kInFlight + q]) * kVecs;
      w[q] = weight[t * kInFlight + q];
    }
    uint4 g[kUnroll], yv[kInFlight][kUnroll];
    const int first = chunk * kChunkVecs + lane;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = first + u * kWave;
      if (i < kVecs) g[u] = grad[static_cast<size_t>(t) * kVecs + i];
    }
#pragma unroll
    for (int q = 0; q < kInFlight; ++q) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = first + u * kWave;
        if (i < kVecs) yv[q][u] = y[row[q] + i];
      }
    }
#pragma unroll
    for (int q = 0; q < kInFlight; ++q) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = first + u * kWave;
        if (i >= kVecs) continue;
        sum += dot4(g[u], yv[q][u]);
        if (kStore) grad_y[row[q] + i] = scale4(w[q], g[u]);
      }
    }
  }
  dots[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}

// The same tasks with the loads as asynchronous copies into shared memory (cp.async, 16 bytes a lane, no
// registers held): each wave keeps kStages tasks' chunks in flight, the task kStages - 1 ahead issued before the
// current one is summed. Each lane reads back only what it copied, so its own wait_group is the only sync. What
// the fused kernel could do on NVIDIA if bytes in flight are what holds its answers (gfx942 would need loads to
// LDS instead). Shared memory: 8 waves x kStages x 5 chunks of kUnroll x 512 bytes a block.
__device__ __forceinline__ void copy16_async(uint4* smem, const uint4* gmem, bool in_row) {
  const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(to), "l"(gmem), "r"(in_row ? 16 : 0));
}
template <int kUnroll, int kStages>
__global__ void __launch_bounds__(256)
    answers_async(const uint4* __restrict__ grad, const uint4* __restrict__ y, uint4* __restrict__ grad_y,
                  const int* __restrict__ pos, const float* __restrict__ weight, float* __restrict__ dots) {
  constexpr int kChunkVecs = kWave * kUnroll;
  constexpr int kChunks = (kVecs + kChunkVecs - 1) / kChunkVecs;
  constexpr int kStageVecs = (1 + kInFlight) * kChunkVecs;  // a wave's chunks of one task
  constexpr int kTasks = kTokens * kChunks;
  extern __shared__ uint4 smem[];
  const int lane = threadIdx.x % kWave;
  uint4* ring = smem + (threadIdx.x / kWave) * kStages * kStageVecs;
  const int wave = (blockIdx.x * blockDim.x + threadIdx.x) / kWave;
  const int waves = gridDim.x * blockDim.x / kWave;
  const auto issue = [&](int task, int stage) {
    if (task < kTasks) {
      const int t = task / kChunks, first = (task % kChunks) * kChunkVecs + lane;
      uint4* at = ring + stage * kStageVecs + lane;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = first + u * kWave;
        copy16_async(at + u * kWave, grad + static_cast<size_t>(t) * kVecs + (i < kVecs ? i : 0), i < kVecs);
      }
#pragma unroll
      for (int q = 0; q < kInFlight; ++q) {
        const size_t row = static_cast<size_t>(pos[t * kInFlight + q]) * kVecs;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int i = first + u * kWave;
          copy16_async(at + ((1 + q) * kUnroll + u) * kWave, y + row + (i < kVecs ? i : 0), i < kVecs);
        }
      }
      asm volatile("prefetch.global.L1 [%0];" ::"l"(weight + t * kInFlight));
    }
    asm volatile("cp.async.commit_group;");  // an empty group where no task is left: the count stays uniform
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(wave + s * waves, s);
  float sum = 0.0f;
  int n = 0;
  for (int task = wave; task < kTasks; task += waves, ++n) {
    issue(task + (kStages - 1) * waves, (n + kStages - 1) % kStages);
    asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 1));  // this lane's copies of `task` are in
    const uint4* at = ring + (n % kStages) * kStageVecs + lane;
    const int t = task / kChunks, first = (task % kChunks) * kChunkVecs + lane;
#pragma unroll
    for (int q = 0; q < kInFlight; ++q) {
      const size_t row = static_cast<size_t>(pos[t * kInFlight + q]) * kVecs;  // in L1 since its issue
      const float w = weight[t * kInFlight + q];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = first + u * kWave;
        if (i >= kVecs) continue;
        const uint4 g = at[u * kWave];
        sum += dot4(g, at[((1 + q) * kUnroll + u) * kWave]);
        grad_y[row + i] = scale4(w, g);
      }
    }
  }
  asm volatile("cp.async.wait_group 0;");
  dots[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}

// What torch.mul does over the same rows: y in order, grad y = 0.5 y out.
__global__ void scaled_copy(const uint4* __restrict__ y, uint4* __restrict__ out, size_t vecs) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < vecs;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = scale4(0.5f, y[i]);
}

template <typename Launch>
static float median_us(Launch launch) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) launch();
  std::vector<float> us;
  for (int i = 0; i < 20; ++i) {
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    us.push_back(ms * 1000.0f);
  }
  CHECK(cudaGetLastError());
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t row_bytes = kVecs * 16;
  uint4 *grad, *y, *grad_y;
  int* pos;
  float *weight, *dots;
  CHECK(cudaMalloc(&grad, kTokens * row_bytes));
  CHECK(cudaMalloc(&y, kRows * row_bytes));
  CHECK(cudaMalloc(&grad_y, kRows * row_bytes));
  CHECK(cudaMalloc(&pos, kRows * sizeof(int)));
  CHECK(cudaMalloc(&weight, kRows * sizeof(float)));
  CHECK(cudaMalloc(&dots, static_cast<size_t>(sms) * 4 * 256 * sizeof(float)));  // the largest grid's threads
  CHECK(cudaMemset(grad, 0x3f, kTokens * row_bytes));
  CHECK(cudaMemset(y, 0x3f, kRows * row_bytes));
  std::vector<float> w(kRows, 0.25f);
  CHECK(cudaMemcpy(weight, w.data(), kRows * sizeof(float), cudaMemcpyHostToDevice));
  std::vector<int> consecutive(kRows), random(kRows);
  std::iota(consecutive.begin(), consecutive.end(), 0);
  random = consecutive;
  std::shuffle(random.begin(), random.end(), std::mt19937(1));

  const double answer_bytes = 2.0 * kRows * row_bytes + 1.0 * kTokens * row_bytes;  // y, grad y, grad
  const float copy_us = median_us([&] { scaled_copy<<<sms * 8, 256>>>(y, grad_y, kRows * kVecs); });
  std::printf("SMs %d; y %.1f MB, grad y %.1f MB, grad %.1f MB\n", sms, kRows * row_bytes / 1e6,
              kRows * row_bytes / 1e6, kTokens * row_bytes / 1e6);
  std::printf("scaled copy of y (torch.mul's bytes, no grad): %.1f us, %.2f TB/s\n", copy_us,
              2.0 * kRows * row_bytes / copy_us / 1e6);
  std::printf(
      "| rows of y | kUnroll (bytes in flight a wave) | waves a SM | stores | us | TB/s "
      "|\n|---|---|---|---|---|---|\n");
  // One instance a (kUnroll, stores): its time, and how many of its blocks a SM holds at once (registers).
  const auto time_instance = [&](auto kernel, int grid, int* resident) {
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(resident, kernel, 256, 0));
    return median_us([&] { kernel<<<grid, 256>>>(grad, y, grad_y, pos, weight, dots); });
  };
  const auto run = [&](const char* order, const std::vector<int>& p, int unroll, int blocks_per_sm, bool store) {
    CHECK(cudaMemcpy(pos, p.data(), kRows * sizeof(int), cudaMemcpyHostToDevice));
    const int grid = sms * blocks_per_sm;
    float us = 0;
    int resident = 0;
    if (unroll == 2 && store) us = time_instance(answers<2, true>, grid, &resident);
    if (unroll == 4 && store) us = time_instance(answers<4, true>, grid, &resident);
    if (unroll == 8 && store) us = time_instance(answers<8, true>, grid, &resident);
    if (unroll == 4 && !store) us = time_instance(answers<4, false>, grid, &resident);
    const double bytes = store ? answer_bytes : answer_bytes - kRows * row_bytes;
    std::printf("| %s | %d (%d KB) | %d (%d resident) | %s | %.1f | %.2f |\n", order, unroll, 5 * unroll / 2,
                8 * blocks_per_sm, 8 * std::min(blocks_per_sm, resident), store ? "on" : "off", us, bytes / us / 1e6);
  };
  // Each thread's sum of dot products over its tasks, for the async form to be checked against (same grid, same
  // tasks a wave in the same order, so the same bits).
  const auto read_dots = [&] {
    std::vector<float> d(static_cast<size_t>(sms) * 256);
    CHECK(cudaMemcpy(d.data(), dots, d.size() * sizeof(float), cudaMemcpyDeviceToHost));
    return d;
  };
  for (int blocks : {4, 2, 1}) run("random", random, 4, blocks, true);  // the kernel: 1 (8 waves), random
  const std::vector<float> sync_dots = read_dots();
  run("consecutive", consecutive, 4, 1, true);
  run("random", random, 4, 1, false);
  run("random", random, 2, 1, true);
  run("random", random, 8, 1, true);
  run("random", random, 8, 2, true);
  // The async form, one block (8 waves) a SM as in the fused kernel, random rows, stores on.
  CHECK(cudaMemcpy(pos, random.data(), kRows * sizeof(int), cudaMemcpyHostToDevice));
  const auto run_async = [&](auto kernel, int unroll, int stages) {
    const int smem = 8 * stages * (1 + kInFlight) * kWave * unroll * 16;
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const float us = median_us([&] { kernel<<<sms, 256, smem>>>(grad, y, grad_y, pos, weight, dots); });
    std::printf(
        "| random, cp.async %d stages (%d KB in flight a wave, %d KB shared a block) | %d | 8 | on | %.1f | %.2f |\n",
        stages, stages * 5 * unroll / 2, smem / 1024, unroll, us, answer_bytes / us / 1e6);
    if (unroll == 4) {  // the same sums in the same order, but each kernel contracts its own multiply-adds
      const std::vector<float> d = read_dots();
      double worst = 0;
      for (size_t i = 0; i < d.size(); ++i)
        worst = std::max(worst, std::abs(double(d[i]) - sync_dots[i]) / std::max(1.0, std::abs(double(sync_dots[i]))));
      std::printf("  its dot products against the registers' form: largest relative difference %.2g%s\n", worst,
                  worst > 1e-4 ? " (WRONG)" : "");
    }
  };
  run_async(answers_async<4, 2>, 4, 2);
  run_async(answers_async<2, 4>, 2, 4);
  run_async(answers_async<2, 2>, 2, 2);
  return 0;
}
