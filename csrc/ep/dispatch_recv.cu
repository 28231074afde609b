// Dispatch-recv: waits for every source rank's row count, then lays the received rows out per
// local expert, padded or packed (see Layout in config.h), with metadata (source rank, source
// token, k, weight), and records the route (which row of expert_x holds each received
// (row, k)) for combine and for the backward pass.
//
// All received rows, whatever their source, are numbered 0..N-1 and split evenly over the
// blocks, so the work is even however unbalanced the sources are. A row that carries several
// of this rank's experts is read once and written to each of them. Every block knows each
// expert's total from the per-expert counts the sources sent, so the packed offsets need no
// second pass; positions inside an expert come from a local atomic counter (order inside an
// expert is free by contract).
#include "ep_device.cuh"
#include "moe_a2a/platform/block_ops.h"

namespace moe_a2a {
namespace {

static_assert(kMaxExperts / 2 <= kEpBlock, "one thread per local expert when scanning expert totals");

// Rows of expert_x that each local expert may use: [first[e], first[e] + limit[e]). Padded:
// e * capacity and capacity. Packed: prefix sums of the experts' totals, and as many rows as
// fit before the end of the buffer. Returns the rows of all local experts together.
MOE_A2A_DEVICE int expert_segments(const EpBuffers& b, int* first, int* limit, int* total) {
  using Scan = BlockScan<int, kEpBlock>;
  __shared__ typename Scan::TempStorage scan_tmp;
  const EpConfig& cfg = b.c.cfg;
  const int e = threadIdx.x;
  int n = 0;
  if (e < cfg.experts_per_rank()) {
    for (int src = 0; src < cfg.world; ++src) n += b.recv_count(cfg.rank, src)[e];
  }
  int before = 0, all = 0;
  Scan::exclusive_sum(scan_tmp, n, before, all);
  if (e < cfg.experts_per_rank()) {
    total[e] = n;
    const int cap = cfg.expert_capacity;
    first[e] = cfg.packed() ? min(before, cap) : e * cap;
    limit[e] = cfg.packed() ? min(n, cap - first[e]) : cap;
  }
  __syncthreads();
  return all;
}

__global__ void __launch_bounds__(kEpBlock) dispatch_recv_kernel(EpContext c, DispatchRecvArgs a) {
  __shared__ int count[kMaxWorld];
  __shared__ int first_row[kMaxWorld + 1];
  __shared__ int seg_first[kMaxExperts / 2], seg_limit[kMaxExperts / 2], seg_total[kMaxExperts / 2];
  __shared__ int dest[kRowBatch][kMaxTopk];  // row of expert_x for each (row, k) of the batch, or -1
  MOE_A2A_PROFILE_TRACK(prof, c.profiler, kDispatchRecv);

  const EpBuffers b{c};
  const EpConfig& cfg = c.cfg;
  const int me = cfg.rank;
  const int local_experts = cfg.experts_per_rank();
  const uint32_t epoch = b.current_epoch();

  MOE_A2A_PROFILE(const uint64_t wait_start = prof.now());
  if (!wait_for_sources(c, b.dispatch_flag(me, 0), epoch, ErrorCode::kDispatchTimeout, kDispatchRecv, count)) return;
  MOE_A2A_PROFILE(prof.record_wait(ProfilerEvent::kDispatchRecvWait, wait_start, cfg.world));
  if (threadIdx.x == 0) {
    int sum = 0;
    for (int r = 0; r < cfg.world; ++r) {
      first_row[r] = sum;
      sum += count[r];
    }
    first_row[cfg.world] = sum;
  }
  const int all_rows = expert_segments(b, seg_first, seg_limit, seg_total);  // synchronises the block

  if (blockIdx.x == 0) {
    if (threadIdx.x <= cfg.world) a.route.rows[threadIdx.x] = first_row[threadIdx.x];
    for (int e = threadIdx.x; e < local_experts; e += blockDim.x) {
      a.expert_num_tokens[e] = min(seg_total[e], seg_limit[e]);
      a.expert_offsets[e] = seg_first[e];
    }
    if (threadIdx.x == 0) {
      a.expert_offsets[local_experts] = cfg.packed() ? min(all_rows, cfg.expert_capacity)
                                                     : local_experts * cfg.expert_capacity;
    }
  }

  // Rows g = 0..N-1 over all sources; this block takes its contiguous share, batch by batch.
  const BlockRows rows = block_rows(first_row[cfg.world]);
  const int vecs = b.vecs_per_row();
  const int chunks = chunks_per_row(vecs);
  Vec16* out = static_cast<Vec16*>(a.expert_x);
  for (int batch = rows.begin; batch < rows.end; batch += kRowBatch) {
    const int n = min(kRowBatch, rows.end - batch);
    MOE_A2A_PROFILE(const uint64_t place_start = prof.now());
    // Positions: one thread per (row, k) that names a local expert.
    for (int j = threadIdx.x; j < n * cfg.topk; j += blockDim.x) {
      const int r = j / cfg.topk, k = j % cfg.topk;
      int src, slot;
      row_source(first_row, cfg.world, batch + r, src, slot);
      const size_t row = b.row_index(src, slot);
      const int e = b.recv_expert(me, src, slot)[k];
      const int token = *b.recv_token(me, src, slot);
      int at = -1;
      if (e >= 0 && e < local_experts) {
        const int pos = static_cast<int>(atomic_add_relaxed_gpu(b.expert_count() + e, 1u));
        if (pos < seg_limit[e]) {
          at = seg_first[e] + pos;
          a.expert_meta[3 * static_cast<size_t>(at) + 0] = src;
          a.expert_meta[3 * static_cast<size_t>(at) + 1] = token;
          a.expert_meta[3 * static_cast<size_t>(at) + 2] = k;
          a.expert_weights[at] = b.recv_weight(me, src, slot)[k];
        } else if (cfg.packed()) {
          report_error(c, ErrorCode::kCapacityOverflow, src, -1, token, cfg.expert_capacity, all_rows);
        } else {
          report_error(c, ErrorCode::kCapacityOverflow, src, e, token, cfg.expert_capacity, pos + 1);
        }
      }
      dest[r][k] = at;
      a.route.pos[row * cfg.topk + k] = at;
      if (k == 0) a.route.token[row] = token;
    }
    __syncthreads();
    MOE_A2A_PROFILE(if (wave_id() == 0) prof.record(ProfilerEvent::kDispatchRecvPlace, place_start, batch));
    // Payload: tasks (row, chunk) over the waves; each chunk is read once and written to
    // every local expert of the row.
    for (int task = wave_id(); task < n * chunks; task += kWavesPerBlock) {
      const int r = task / chunks, chunk = task % chunks;
      int src, slot;
      row_source(first_row, cfg.world, batch + r, src, slot);
      MOE_A2A_PROFILE_SPAN(copy_span, prof, kDispatchRecvCopy, src);
      Vec16 v[kUnroll];
      load_chunk(b.recv_x(me, src, slot), chunk, vecs, v);
      for (int k = 0; k < cfg.topk; ++k) {
        const int d = dest[r][k];
        if (d >= 0) store_chunk(out + static_cast<size_t>(d) * vecs, chunk, vecs, v);
      }
    }
    __syncthreads();  // dest[] is rewritten by the next batch
  }

  // The last block clears the position counters for the next call.
  if (last_block_done(b.done_counter(kDispatchRecv))) {
    for (int e = threadIdx.x; e < local_experts; e += blockDim.x) b.expert_count()[e] = 0;
  }
}

}  // namespace

void launch_dispatch_recv(const EpContext& ctx, const DispatchRecvArgs& args, hipStream_t stream) {
  dispatch_recv_kernel<<<ctx.num_blocks, kEpBlock, 0, stream>>>(ctx, args);
  MOE_A2A_GPU_CHECK(hipGetLastError());
}

}  // namespace moe_a2a
