// Dispatch-recv: waits for every source rank's row count, then lays the received rows out per
// local expert: expert_x[e][pos] with metadata (source rank, source token, k, weight).
//
// All received rows, whatever their source, are numbered 0..N-1 and dealt round-robin to the
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
    if (!wait_until_at_least_sys(b.dispatch_flag(c.cfg.rank, src), target, c.timeout_ticks, &seen)) {
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
  __shared__ int dest[kMaxTopk];  // e * capacity + pos for each k of the current row, or -1

  const EpBuffers b{c};
  const EpConfig& cfg = c.cfg;
  const int me = cfg.rank;
  const int cap = cfg.expert_capacity;
  const int local_experts = cfg.experts_per_rank();
  const uint32_t epoch = b.current_epoch();

  // A timed-out block leaves without touching any buffer; the engine is failed from then on.
  if (!wait_for_counts(c, epoch, count, first_row)) return;

  const int total_rows = first_row[cfg.world];
  const int vecs = b.vecs_per_row();
  for (int g = blockIdx.x; g < total_rows; g += gridDim.x) {
    int src = 0;
    while (g >= first_row[src + 1]) ++src;
    const int slot = g - first_row[src];

    if (threadIdx.x < cfg.topk) {
      const int k = threadIdx.x;
      const int e = b.recv_expert(me, src, slot)[k];
      int pos_code = -1;
      if (e >= 0 && e < local_experts) {
        const int pos = static_cast<int>(atomic_add_relaxed_gpu(b.expert_count() + e, 1u));
        if (pos < cap) {
          pos_code = e * cap + pos;
          const size_t m = static_cast<size_t>(e) * cap + pos;
          a.expert_meta[3 * m + 0] = src;
          a.expert_meta[3 * m + 1] = *b.recv_token(me, src, slot);
          a.expert_meta[3 * m + 2] = k;
          a.expert_weights[m] = b.recv_weight(me, src, slot)[k];
        } else {
          report_error(c, ErrorCode::kCapacityOverflow, src, e, *b.recv_token(me, src, slot), cap, pos + 1);
        }
      }
      dest[k] = pos_code;
      b.row_pos(src, slot)[k] = pos_code;
    }
    __syncthreads();

    const Vec16* row = b.recv_x(me, src, slot);
    Vec16* out = static_cast<Vec16*>(a.expert_x);
    for (int v = threadIdx.x; v < vecs; v += blockDim.x) {
      const Vec16 val = row[v];
      for (int k = 0; k < cfg.topk; ++k) {
        if (dest[k] >= 0) out[static_cast<size_t>(dest[k]) * vecs + v] = val;
      }
    }
    __syncthreads();  // dest[] is rewritten for the next row
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
