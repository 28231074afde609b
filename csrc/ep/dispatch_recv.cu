// Dispatch-recv: waits for every source rank's row count, then lays the received rows out per
// local expert: expert_x[e][pos] with metadata (source rank, source token, k, weight).
//
// All received rows, whatever their source, are numbered 0..N-1 and split evenly over the
// blocks, so the work is even however unbalanced the sources are. A row that carries several
// of this rank's experts is read once and written to each of them. Positions inside an expert
// come from a local atomic counter: order inside an expert is free by contract, and the
// position of every (row, k) is remembered in row_pos for combine-send.
#include "ep_device.cuh"

namespace moe_a2a {
namespace {

// Waits for the dispatch flags of all sources; fills count[]/first_row[] (prefix sums).
// Returns false if a wait timed out (reported). Must be called by all threads.
MOE_A2A_DEVICE bool wait_for_counts(const EpContext& c, uint32_t epoch, int* count, int* first_row) {
  __shared__ bool ok;
  const EpBuffers b{c};
  if (threadIdx.x == 0) ok = true;
  __syncthreads();
  if (threadIdx.x < c.cfg.world) {
    const int src = threadIdx.x;
    uint64_t seen = 0;
    const uint64_t target = make_flag(epoch, 0);
    const bool arrived = wait_until_at_least_sys(b.dispatch_flag(c.cfg.rank, src), target, c.timeout_ticks, &seen);
    MOE_A2A_PROFILE(profiler_arrivals()[src] = wall_clock());
    if (!arrived) {
      report_error(c, ErrorCode::kDispatchTimeout, src, -1, src, target, seen);
      ok = false;
      count[src] = 0;
    } else {
      const uint32_t payload = flag_payload(seen);
      if (payload & kFlagErrorBit) report_error(c, ErrorCode::kPeerError, src, -1, -1, 0, 0);
      count[src] = static_cast<int>(min(payload & kFlagCountMask, static_cast<uint32_t>(c.cfg.max_tokens)));
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int sum = 0;
    for (int r = 0; r < c.cfg.world; ++r) {
      first_row[r] = sum;
      sum += count[r];
    }
    first_row[c.cfg.world] = sum;
  }
  __syncthreads();
  return ok;
}

__global__ void __launch_bounds__(kEpBlock) dispatch_recv_kernel(EpContext c, DispatchRecvArgs a) {
  __shared__ int count[kMaxWorld];
  __shared__ int first_row[kMaxWorld + 1];
  __shared__ int dest[kRowBatch][kMaxTopk];  // e * capacity + pos for each (row, k) of the batch, or -1
  MOE_A2A_PROFILE_TRACK(prof, c.profiler, kDispatchRecv);

  const EpBuffers b{c};
  const EpConfig& cfg = c.cfg;
  const int me = cfg.rank;
  const int cap = cfg.expert_capacity;
  const int local_experts = cfg.experts_per_rank();
  const uint32_t epoch = b.current_epoch();

  // A timed-out block leaves without touching any buffer; the engine is failed from then on.
  MOE_A2A_PROFILE(const uint64_t wait_start = prof.now());
  if (!wait_for_counts(c, epoch, count, first_row)) return;
  MOE_A2A_PROFILE(prof.record_wait(ProfilerEvent::kDispatchRecvWait, wait_start, cfg.world));

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
      const int e = b.recv_expert(me, src, slot)[k];
      int pos_code = -1;
      if (e >= 0 && e < local_experts) {
        const int pos = static_cast<int>(atomic_add_relaxed_gpu(b.expert_count() + e, 1u));
        const int token = *b.recv_token(me, src, slot);
        if (pos < cap) {
          pos_code = e * cap + pos;
          const size_t m = static_cast<size_t>(e) * cap + pos;
          a.expert_meta[3 * m + 0] = src;
          a.expert_meta[3 * m + 1] = token;
          a.expert_meta[3 * m + 2] = k;
          a.expert_weights[m] = b.recv_weight(me, src, slot)[k];
        } else {
          report_error(c, ErrorCode::kCapacityOverflow, src, e, token, cap, pos + 1);
        }
      }
      dest[r][k] = pos_code;
      b.row_pos(src, slot)[k] = pos_code;
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

  // The last block turns the counters into expert_num_tokens and clears them for the next call.
  if (last_block_done(b.done_counter(kDispatchRecv))) {
    for (int e = threadIdx.x; e < local_experts; e += blockDim.x) {
      const uint32_t n = ld_relaxed_sys(b.expert_count() + e);
      a.expert_num_tokens[e] = static_cast<int32_t>(min(n, static_cast<uint32_t>(cap)));
      b.expert_count()[e] = 0;
    }
  }
}

}  // namespace

void launch_dispatch_recv(const EpContext& ctx, const DispatchRecvArgs& args, hipStream_t stream) {
  dispatch_recv_kernel<<<ctx.num_blocks, kEpBlock, 0, stream>>>(ctx, args);
  MOE_A2A_GPU_CHECK(hipGetLastError());
}

}  // namespace moe_a2a
