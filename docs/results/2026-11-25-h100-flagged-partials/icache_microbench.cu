// Cost of running straight-line code the SM has not run yet: one warp runs N dependent-free FMAs
// (16 bytes of SASS each), timed inside the kernel, cold (after another kernel of 256 KB of code)
// and warm (the same kernel again right after).
#include <cstdio>
#include <cuda_runtime.h>
template <int N>
__global__ void straight(float* out, long long* t) {
  float a = threadIdx.x, b = 1.0f, c = 2.0f, d = 3.0f;
  long long t0 = clock64();
#pragma unroll
  for (int i = 0; i < N; ++i) {
    asm volatile("fma.rn.f32 %0, %1, %2, %0;" : "+f"(a) : "f"(b), "f"(c));
    asm volatile("fma.rn.f32 %0, %1, %2, %0;" : "+f"(d) : "f"(b), "f"(c));
  }
  long long t1 = clock64();
  out[threadIdx.x] = a + d;
  if (threadIdx.x == 0) t[0] = t1 - t0;
}
int main() {
  float* out; long long* t; cudaMalloc(&out, 4096); cudaMalloc(&t, 8);
  int clk; cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0);
  auto us = [&]() { long long c; cudaMemcpy(&c, t, 8, cudaMemcpyDeviceToHost); return c / (clk / 1e3); };
  auto flush = [&]() { straight<8192><<<132, 32>>>(out, t); cudaDeviceSynchronize(); };  // 256 KB of other code
#define RUN(N)                                                                                      \
  {                                                                                                 \
    flush(); straight<N><<<1, 32>>>(out, t); cudaDeviceSynchronize(); double cold = us();           \
    straight<N><<<1, 32>>>(out, t); cudaDeviceSynchronize(); double warm = us();                    \
    printf("%6d KB of code: cold %7.2f us, warm %7.2f us, cold - warm %6.2f us (%.3f us per KB)\n", \
           N * 2 * 16 / 1024, cold, warm, cold - warm, (cold - warm) / (N * 2 * 16 / 1024.0));     \
  }
  RUN(32) RUN(128) RUN(512) RUN(1024) RUN(2048) RUN(4096)
  printf("err: %s\n", cudaGetErrorString(cudaGetLastError()));
}
