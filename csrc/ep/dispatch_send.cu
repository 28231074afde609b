// Dispatch-send: every token goes once to every rank that owns at least one of its top-k
// experts (not once per (token, k)), with the list of that rank's experts and weights as
// metadata. Rows are written straight into the receiver's recv buffer with peer stores.
//
// Block b takes a contiguous range of tokens. Slots in a destination's buffer are reserved
// per block (one atomic per block and destination), so no remote atomics are needed and a
// slot is never handed out twice. When every block is done, the last one publishes one flag
// per destination: (epoch, row count), after the number of (token, k) pairs sent to each of
// that destination's experts (which the packed layout turns into offsets). The receiver
// acquires that flag and can then read every row and count, because each block fenced at
// system scope before counting itself done.
#include "ep_device.cuh"
#include "moe_a2a/platform/block_ops.h"

namespace moe_a2a {
namespace {

// Read as int64 so that an out-of-range int64 id cannot wrap into the valid range.
MOE_A2A_DEVICE int64_t read_expert(const DispatchSendArgs& a, size_t i) {
  return a.topk_idx_is_int64 ? static_cast<const int64_t*>(a.topk_idx)[i]
                             : static_cast<int64_t>(static_cast<const int32_t*>(a.topk_idx)[i]);
}

__global__ void __launch_bounds__(kEpBlock) dispatch_send_kernel(EpContext c, DispatchSendArgs a) {
  using Scan = BlockScan<int, kEpBlock>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ uint32_t dest_mask[kEpBlock];
  __shared__ int slot[kEpBlock][kMaxWorld];
  __shared__ int block_base[kMaxWorld];
  __shared__ uint32_t pairs_per_expert[kMaxExperts];  // this block's (token, k) pairs per global expert
  MOE_A2A_PROFILE_TRACK(prof, c.profiler, kDispatchSend);

  const EpBuffers b{c};
  const EpConfig& cfg = c.cfg;
  const int me = cfg.rank;
  const uint32_t epoch = b.current_epoch();

  const int num_tokens = a.route.num_tokens;
  const int per_block = (num_tokens + gridDim.x - 1) / gridDim.x;  // <= kEpBlock, checked by the launcher
  const int first = blockIdx.x * per_block;
  const int count = max(0, min(per_block, num_tokens - first));
  for (int e = threadIdx.x; e < cfg.num_experts; e += blockDim.x) pairs_per_expert[e] = 0;
  __syncthreads();

  // 1. Routing: which ranks each token goes to. Ids are checked here, before any remote
  //    write: a bad id is reported and its (token, k) pair dropped, never sent anywhere.
  MOE_A2A_PROFILE(const uint64_t route_start = prof.now());
  uint32_t mask = 0;
  if (threadIdx.x < count) {
    const int t = first + threadIdx.x;
    for (int k = 0; k < cfg.topk; ++k) {
      const size_t i = static_cast<size_t>(t) * cfg.topk + k;
      const int64_t e = read_expert(a, i);
      if (e < 0 || e >= cfg.num_experts) {
        const int32_t shown = e < INT32_MIN ? INT32_MIN : (e > INT32_MAX ? INT32_MAX : static_cast<int32_t>(e));
        report_error(c, ErrorCode::kBadExpertId, -1, shown, t, cfg.num_experts, 0);
        continue;
      }
      mask |= 1u << cfg.owner_rank(static_cast<int32_t>(e));
      atomic_add_relaxed_block(pairs_per_expert + e, 1u);
    }
    a.route.dest_mask[t] = static_cast<int32_t>(mask);  // combine-recv sums exactly these ranks' partials
  }
  dest_mask[threadIdx.x] = mask;

  // 2. Slots: a block-wide exclusive scan per destination orders this block's tokens; one
  //    atomic per destination reserves the block's range in that destination's buffer.
  for (int r = 0; r < cfg.world; ++r) {
    int offset = 0, total = 0;
    Scan::exclusive_sum(scan_tmp, static_cast<int>((mask >> r) & 1u), offset, total);
    if (threadIdx.x == 0) block_base[r] = total > 0 ? static_cast<int>(atomic_add_relaxed_gpu(b.slot_counter() + r, static_cast<uint32_t>(total))) : 0;
    __syncthreads();
    slot[threadIdx.x][r] = block_base[r] + offset;
  }
  for (int e = threadIdx.x; e < cfg.num_experts; e += blockDim.x) {
    if (pairs_per_expert[e] != 0) atomic_add_relaxed_gpu(b.send_count() + e, pairs_per_expert[e]);
  }
  __syncthreads();
  MOE_A2A_PROFILE(if (wave_id() == 0) prof.record(ProfilerEvent::kDispatchSendRoute, route_start, -1));

  // 3. Rows: tasks (token, chunk) over the block's waves. Each chunk is loaded once and stored
  //    to every destination rank of the token; the chunk-0 task also writes the metadata: for
  //    each k, the expert's local id on that rank (or -1) and its weight.
  const int vecs = b.vecs_per_row();
  const int chunks = chunks_per_row(vecs);
  for (int task = wave_id(); task < count * chunks; task += kWavesPerBlock) {
    const int i = task / chunks, chunk = task % chunks;
    const int t = first + i;
    const uint32_t m = dest_mask[i];
    if (m == 0) continue;
    MOE_A2A_PROFILE_SPAN(token_span, prof, kDispatchSendToken, t);
    if (chunk == 0) {
      for (int j = lane_id(); j < cfg.world * cfg.topk; j += kWaveSize) {
        const int r = j / cfg.topk, k = j % cfg.topk;
        if (!((m >> r) & 1u)) continue;
        const size_t idx = static_cast<size_t>(t) * cfg.topk + k;
        const int64_t e = read_expert(a, idx);
        const bool here = e >= 0 && e < cfg.num_experts && cfg.owner_rank(static_cast<int32_t>(e)) == r;
        b.recv_expert(r, me, slot[i][r])[k] = here ? static_cast<int32_t>(e) - r * cfg.experts_per_rank() : -1;
        b.recv_weight(r, me, slot[i][r])[k] = a.topk_weights[idx];
        if (k == 0) *b.recv_token(r, me, slot[i][r]) = t;
      }
    }
    Vec16 v[kUnroll];
    load_chunk(reinterpret_cast<const Vec16*>(static_cast<const uint8_t*>(a.x) + static_cast<size_t>(t) * cfg.row_bytes()),
               chunk, vecs, v);
    for (int r = 0; r < cfg.world; ++r) {
      if ((m >> r) & 1u) store_chunk(b.recv_x(r, me, slot[i][r]), chunk, vecs, v);
    }
  }

  // 4. Publish: the last block tells every rank how many (token, k) pairs each of its experts
  //    got from us, then, once those stores are ordered before it, how many rows (possibly 0).
  MOE_A2A_PROFILE_SPAN(count_span, prof, kDispatchSendCounts, 0, wave_id() == 0);
  if (last_block_done(b.done_counter(kDispatchSend))) {
    MOE_A2A_PROFILE(count_span.set_arg(1));
    const int local_experts = cfg.experts_per_rank();
    for (int e = threadIdx.x; e < cfg.num_experts; e += blockDim.x) {
      const int r = e / local_experts;
      b.recv_count(r, me)[e - r * local_experts] = static_cast<int32_t>(ld_relaxed_sys(b.send_count() + e));
      b.send_count()[e] = 0;
    }
    __syncthreads();
    if (threadIdx.x == 0) fence_acq_rel_sys();  // the counts of every thread before any flag
    __syncthreads();
    if (threadIdx.x < cfg.world) {
      const int r = threadIdx.x;
      const uint32_t rows = ld_relaxed_sys(b.slot_counter() + r);
      b.slot_counter()[r] = 0;
      st_release_sys(b.dispatch_flag(r, me), make_flag(epoch, (rows & kFlagCountMask) | round_error_bit(b)));
    }
  }
}

}  // namespace

void launch_dispatch_send(const EpContext& ctx, const DispatchSendArgs& args, hipStream_t stream) {
  const int num_tokens = args.route.num_tokens;
  MOE_A2A_CHECK(num_tokens >= 0 && num_tokens <= ctx.cfg.max_tokens,
                "dispatch: num_tokens ", num_tokens, " outside [0, ", ctx.cfg.max_tokens, "]");
  MOE_A2A_CHECK((num_tokens + ctx.num_blocks - 1) / ctx.num_blocks <= kEpBlock,
                "dispatch: too many tokens per block; raise num_blocks");
  dispatch_send_kernel<<<ctx.num_blocks, kEpBlock, 0, stream>>>(ctx, args);
  MOE_A2A_GPU_CHECK(hipGetLastError());
}

}  // namespace moe_a2a
