// Cost of one "look" of a wave at 32 KB-ish of flagged words: weak vs strong loads, per scope.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
template <int MODE>
__device__ __forceinline__ void ld2(const uint64_t* p, uint64_t& a, uint64_t& b) {
  if (MODE == 0) { ulonglong2 v = *reinterpret_cast<const ulonglong2*>(p); a = v.x; b = v.y; }
  if (MODE == 1) { asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(a) : "l"(p) : "memory");
                   asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(b) : "l"(p + 1) : "memory"); }
  if (MODE == 2) asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
  if (MODE == 3) asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
  if (MODE == 4) asm volatile("ld.global.cg.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
  if (MODE == 5) asm volatile("ld.relaxed.sys.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}
template <int MODE>
__global__ void look(const uint64_t* row, int looks, long long* out, uint64_t* sink) {
  uint64_t acc = 0;
  long long t0 = clock64();
  for (int l = 0; l < looks; ++l) {
    uint64_t w[16];
#pragma unroll
    for (int k = 0; k < 8; ++k) ld2<MODE>(row + (l & 1) * 4096 + 2 * (k * 32 + threadIdx.x), w[2 * k], w[2 * k + 1]);
#pragma unroll
    for (int k = 0; k < 16; ++k) acc += w[k];
    if (acc == 12345) break;
  }
  long long t1 = clock64();
  if (threadIdx.x == 0) out[0] = t1 - t0;
  sink[threadIdx.x] = acc;
}
template <int MODE>
void run(const char* name, uint64_t* row, long long* out, uint64_t* sink, int blocks) {
  for (int rep = 0; rep < 3; ++rep) {
    look<MODE><<<blocks, 32>>>(row, 100, out, sink);
    cudaDeviceSynchronize();
  }
  long long c; cudaMemcpy(&c, out, 8, cudaMemcpyDeviceToHost);
  int clk; cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0);
  printf("%-28s blocks %3d: %.3f us per look (16 x 8B x 32 lanes per look)\n", name, blocks, c / 100.0 / (clk / 1e3));
}
int main() {
  uint64_t *row, *sink; long long* out;
  cudaMalloc(&row, 1 << 20); cudaMemset(row, 0, 1 << 20); cudaMalloc(&sink, 4096); cudaMalloc(&out, 8);
  for (int blocks : {1, 7}) {
    run<0>("weak 16B", row, out, sink, blocks);
    run<1>("relaxed.sys 8B x2", row, out, sink, blocks);
    run<2>("volatile 16B", row, out, sink, blocks);
    run<5>("relaxed.sys 16B", row, out, sink, blocks);
    run<3>("relaxed.gpu 16B", row, out, sink, blocks);
    run<4>("weak .cg 16B", row, out, sink, blocks);
  }
  printf("err: %s\n", cudaGetErrorString(cudaGetLastError()));
}
