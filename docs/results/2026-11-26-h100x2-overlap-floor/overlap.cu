// Can the link and the local expansion overlap on one GPU? Two GPUs, one process, P2P.
// Each GPU runs the same kernel at once (both directions loaded, as in dispatch):
//  - "remote" workers copy `rbytes` from a local buffer into the peer's buffer (16 B a store);
//  - "local" workers read `lrows` rows of `row` bytes and write each to 4 output rows (expansion).
// Workers are whole blocks (mode b) or the halves of each block (mode w). Every block stamps its
// end time (globaltimer); we report kernel time and each role's last end, median of reps.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                            \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

__device__ __forceinline__ unsigned long long gtime() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

struct Args {
  const uint4* rsrc;
  uint4* rdst;  // peer
  size_t r16;   // vectors to send
  const uint4* lsrc;
  uint4* ldst;
  int lrows, row16, fan;
  int rblocks;      // mode b: blocks [0, rblocks) send
  int rthreads;     // mode w: threads [0, rthreads) of each block send
  int mode;         // 0 = blocks, 1 = warps, 2 = grouped senders (fence + flag a group)
  int group_rows;   // mode 2: rows a group
  int local_copy;   // mode 2: each row also to a local buffer
  uint4* lcopy;     // mode 2: the local copy
  unsigned long long* flags;  // mode 2: peer flags
  unsigned long long* stamps;  // [grid][3]: start, remote end, local end
};

__device__ void copy_remote(const Args& a, int worker, int nworkers, int tid, int nthreads) {
  const size_t per = (a.r16 + nworkers - 1) / nworkers;
  const size_t b = min(per * worker, a.r16), e = min(b + per, a.r16);
  size_t i = b + tid;
  for (; i + 3 * nthreads < e; i += 4 * nthreads) {
    uint4 v0 = a.rsrc[i], v1 = a.rsrc[i + nthreads], v2 = a.rsrc[i + 2 * nthreads], v3 = a.rsrc[i + 3 * nthreads];
    a.rdst[i] = v0;
    a.rdst[i + nthreads] = v1;
    a.rdst[i + 2 * nthreads] = v2;
    a.rdst[i + 3 * nthreads] = v3;
  }
  for (; i < e; i += nthreads) a.rdst[i] = a.rsrc[i];
}

__device__ void expand_local(const Args& a, int worker, int nworkers, int tid, int nthreads) {
  // tasks: (row, vector) pairs, rows split over workers
  const int per = (a.lrows + nworkers - 1) / nworkers;
  const int rb = min(per * worker, a.lrows), re = min(rb + per, a.lrows);
  const size_t n = static_cast<size_t>(re - rb) * a.row16;
  const size_t base = static_cast<size_t>(rb) * a.row16;
  size_t i = tid;
  for (; i + 3 * nthreads < n; i += 4 * nthreads) {
    uint4 v[4];
    size_t idx[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      idx[u] = base + i + u * nthreads;
      v[u] = a.lsrc[idx[u]];
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const size_t row = idx[u] / a.row16, col = idx[u] % a.row16;
      for (int f = 0; f < a.fan; ++f) a.ldst[(row * a.fan + f) * a.row16 + col] = v[u];
    }
  }
  for (; i < n; i += nthreads) {
    const size_t id = base + i, row = id / a.row16, col = id % a.row16;
    const uint4 v = a.lsrc[id];
    for (int f = 0; f < a.fan; ++f) a.ldst[(row * a.fan + f) * a.row16 + col] = v;
  }
}

// Mode 2: like dispatch's sending blocks. Block b sends groups b, b + nb, ...: each row of the
// group to the peer (and, local_copy, to a local buffer), then a barrier, a system fence and a flag.
__device__ void send_groups(const Args& a) {
  const size_t rows = a.r16 / a.row16;
  const size_t groups = (rows + a.group_rows - 1) / a.group_rows;
  for (size_t g = blockIdx.x; g < groups; g += gridDim.x) {
    const size_t r0 = g * a.group_rows, r1 = min(r0 + a.group_rows, rows);
    const size_t b = r0 * a.row16, e = r1 * a.row16;
    for (size_t i = b + threadIdx.x; i < e; i += blockDim.x) {
      const uint4 v = a.rsrc[i];
      a.rdst[i] = v;
      if (a.local_copy) a.lcopy[i] = v;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence_system();
      *reinterpret_cast<volatile unsigned long long*>(a.flags + g) = 1;
    }
  }
}

__global__ void mixed(Args a) {
  const unsigned long long t0 = gtime();
  const int b = blockIdx.x, nb = gridDim.x;
  unsigned long long tr = 0, tl = 0;
  if (a.mode == 2) {
    send_groups(a);
    __syncthreads();
    tr = gtime();
  } else if (a.mode == 0) {
    if (b < a.rblocks) {
      copy_remote(a, b, a.rblocks, threadIdx.x, blockDim.x);
      __syncthreads();
      if (threadIdx.x == 0) __threadfence_system();
      tr = gtime();
    } else {
      expand_local(a, b - a.rblocks, nb - a.rblocks, threadIdx.x, blockDim.x);
      __syncthreads();
      tl = gtime();
    }
  } else {
    const bool remote = threadIdx.x < a.rthreads;
    if (remote) {
      if (a.r16) copy_remote(a, b, nb, threadIdx.x, a.rthreads);
      __threadfence_system();
      tr = gtime();
    } else {
      if (a.lrows) expand_local(a, b, nb, threadIdx.x - a.rthreads, blockDim.x - a.rthreads);
      tl = gtime();
    }
  }
  // last end of each role in this block
  __shared__ unsigned long long sr, sl;
  if (threadIdx.x == 0) sr = sl = 0;
  __syncthreads();
  if (tr) atomicMax(&sr, tr);
  if (tl) atomicMax(&sl, tl);
  __syncthreads();
  if (threadIdx.x == 0) {
    a.stamps[3 * b] = t0;
    a.stamps[3 * b + 1] = sr;
    a.stamps[3 * b + 2] = sl;
  }
}

struct Gpu {
  int dev;
  cudaStream_t s;
  uint4 *rsrc, *rdst, *lsrc, *ldst, *lcopy;
  unsigned long long* flags;
  unsigned long long* stamps;
  cudaEvent_t e0, e1;
};

int main(int argc, char** argv) {
  const int sms = 132;
  const int row16 = 7168 * 2 / 16;  // DeepSeek-V3 row, bf16
  const int T = argc > 1 ? atoi(argv[1]) : 4096;
  const size_t rbytes = static_cast<size_t>(T) * row16 * 16;  // ~ one row per token to the peer
  const int lrows = 2 * T, fan = 4;                          // 2T rows in, 8T rows out
  Gpu g[2];
  for (int d = 0; d < 2; ++d) {
    g[d].dev = d;
    CK(cudaSetDevice(d));
    CK(cudaDeviceEnablePeerAccess(1 - d, 0));
    CK(cudaStreamCreateWithFlags(&g[d].s, cudaStreamNonBlocking));
    CK(cudaMalloc(&g[d].rsrc, rbytes));
    CK(cudaMalloc(&g[d].rdst, rbytes));
    CK(cudaMalloc(&g[d].lsrc, static_cast<size_t>(lrows) * row16 * 16));
    CK(cudaMalloc(&g[d].ldst, static_cast<size_t>(lrows) * fan * row16 * 16));
    CK(cudaMalloc(&g[d].stamps, 3 * 2048 * sizeof(unsigned long long)));
    CK(cudaMalloc(&g[d].lcopy, rbytes));
    CK(cudaMalloc(&g[d].flags, 1 << 20));
    CK(cudaMemset(g[d].rsrc, 1, rbytes));
    CK(cudaMemset(g[d].lsrc, 2, static_cast<size_t>(lrows) * row16 * 16));
    CK(cudaEventCreate(&g[d].e0));
    CK(cudaEventCreate(&g[d].e1));
  }
  struct Cfg {
    const char* name;
    int mode, grid, threads, rblocks, rthreads;
    bool remote, local;
    int group_rows = 0, local_copy = 0;
  };
  std::vector<Cfg> cfgs;
  // remote alone, by block count and block size
  for (int th : {256, 512, 1024})
    for (int nb : {16, 33, 66, 99, 132, 264}) {
      if (nb * th > sms * 2048) continue;
      cfgs.push_back({"remote-only", 0, nb, th, nb, 0, true, false});
    }
  // local alone
  for (int th : {256, 512})
    for (int nb : {33, 66, 99, 132}) cfgs.push_back({"local-only", 0, nb, th, 0, 0, false, true});
  // both, block split: r remote blocks + l local blocks (1 or 2 blocks an SM)
  for (int th : {256, 512})
    for (int rb : {16, 33, 66, 99, 132}) {
      for (int lb : {33, 66, 132}) {
        if ((rb + lb) * th > sms * 2048) continue;
        cfgs.push_back({"both-blocks", 0, rb + lb, th, rb, 0, true, true});
      }
    }
  // both, warp split inside each block
  cfgs.push_back({"both-warps", 1, 132, 512, 0, 256, true, true});
  cfgs.push_back({"both-warps", 1, 132, 1024, 0, 512, true, true});
  cfgs.push_back({"both-warps", 1, 132, 768, 0, 512, true, true});
  cfgs.push_back({"both-warps", 1, 132, 768, 0, 256, true, true});
  cfgs.push_back({"both-warps", 1, 132, 1024, 0, 768, true, true});
  cfgs.push_back({"both-warps", 1, 264, 512, 0, 256, true, true});
  // grouped senders: fence + flag per group, with and without the local copy
  for (int nb : {16, 33, 66, 132})
    for (int gr : {8, 31, 128})
      for (int lc : {0, 1}) {
        Cfg c{"grouped", 2, nb, 256, nb, 0, true, false};
        c.group_rows = gr;
        c.local_copy = lc;
        cfgs.push_back(c);
      }
  printf("T=%d remote %.1f MB each way, local %.1f MB read + %.1f MB written\n", T, rbytes / 1e6,
         lrows * row16 * 16 / 1e6, lrows * fan * row16 * 16.0 / 1e6);
  printf("%-12s %5s %5s %6s %6s %4s %2s | %9s %9s %9s | %7s %7s\n", "what", "grid", "thr", "rblk", "rthr", "grp", "lc", "kernel_us",
         "remote_us", "local_us", "link", "hbm");
  for (const Cfg& c : cfgs) {
    std::vector<double> tk, trr, tll;
    for (int rep = 0; rep < 12; ++rep) {
      for (int d = 0; d < 2; ++d) {
        CK(cudaSetDevice(d));
        Args a{};
        a.rsrc = g[d].rsrc;
        a.rdst = g[1 - d].rdst;
        a.r16 = c.remote ? rbytes / 16 : 0;
        a.lsrc = g[d].lsrc;
        a.ldst = g[d].ldst;
        a.lrows = c.local ? lrows : 0;
        a.row16 = row16;
        a.fan = fan;
        a.rblocks = c.rblocks;
        a.rthreads = c.rthreads;
        a.mode = c.mode;
        a.stamps = g[d].stamps;
        a.group_rows = c.group_rows;
        a.local_copy = c.local_copy;
        a.lcopy = g[d].lcopy;
        a.flags = g[1 - d].flags;
        CK(cudaEventRecord(g[d].e0, g[d].s));
        mixed<<<c.grid, c.threads, 0, g[d].s>>>(a);
        CK(cudaGetLastError());
        CK(cudaEventRecord(g[d].e1, g[d].s));
      }
      double kmax = 0, rmax = 0, lmax = 0;
      for (int d = 0; d < 2; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaStreamSynchronize(g[d].s));
        float ms;
        CK(cudaEventElapsedTime(&ms, g[d].e0, g[d].e1));
        std::vector<unsigned long long> st(3 * c.grid);
        CK(cudaMemcpy(st.data(), g[d].stamps, st.size() * 8, cudaMemcpyDeviceToHost));
        unsigned long long t0 = ~0ull, tr = 0, tl = 0;
        for (int b = 0; b < c.grid; ++b) {
          t0 = std::min(t0, st[3 * b]);
          tr = std::max(tr, st[3 * b + 1]);
          tl = std::max(tl, st[3 * b + 2]);
        }
        kmax = std::max(kmax, ms * 1000.0);
        if (tr) rmax = std::max(rmax, (tr - t0) / 1000.0);
        if (tl) lmax = std::max(lmax, (tl - t0) / 1000.0);
      }
      if (rep >= 2) {
        tk.push_back(kmax);
        trr.push_back(rmax);
        tll.push_back(lmax);
      }
    }
    auto med = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double r = med(trr), l = med(tll);
    printf("%-12s %5d %5d %6d %6d %4d %2d | %9.1f %9.1f %9.1f | %7.1f %7.1f\n", c.name, c.grid, c.threads, c.rblocks,
           c.rthreads, c.group_rows, c.local_copy, med(tk), r, l, r > 0 ? rbytes / r / 1e3 : 0.0,
           l > 0 ? lrows * row16 * 16.0 * (1 + fan) / l / 1e3 : 0.0);
  }
  // copy engine: the peer copy on a DMA engine, alone and next to the local expansion
  for (int withlocal = 0; withlocal < 2; ++withlocal) {
    std::vector<double> tk;
    for (int rep = 0; rep < 12; ++rep) {
      for (int d = 0; d < 2; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaEventRecord(g[d].e0, g[d].s));
        CK(cudaMemcpyPeerAsync(g[1 - d].rdst, 1 - d, g[d].rsrc, d, rbytes, g[d].s));
        CK(cudaEventRecord(g[d].e1, g[d].s));
      }
      if (withlocal) {
        for (int d = 0; d < 2; ++d) {
          CK(cudaSetDevice(d));
          Args a{};
          a.lsrc = g[d].lsrc;
          a.ldst = g[d].ldst;
          a.lrows = lrows;
          a.row16 = row16;
          a.fan = fan;
          a.mode = 0;
          a.rblocks = 0;
          a.stamps = g[d].stamps;
          mixed<<<132, 512>>>(a);  // legacy stream: runs beside the copy
        }
      }
      double kmax = 0;
      for (int d = 0; d < 2; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaDeviceSynchronize());
        float ms;
        CK(cudaEventElapsedTime(&ms, g[d].e0, g[d].e1));
        kmax = std::max(kmax, ms * 1000.0);
      }
      if (rep >= 2) tk.push_back(kmax);
    }
    std::sort(tk.begin(), tk.end());
    printf("copy-engine%s: peer copy %.1f us (%.1f GB/s)\n", withlocal ? " + local kernel" : "", tk[tk.size() / 2],
           rbytes / tk[tk.size() / 2] / 1e3);
  }
  return 0;
}
