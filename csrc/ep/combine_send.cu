// Combine-send: for every row this rank received in a dispatch, sums the outputs of the row's
// local experts, weighted by the router (or not: the backward of dispatch), in fp32 and in
// ascending k, and stores that one partial sum straight into the source rank's comb_x at the
// source token's index. One row goes back per (token, expert rank), the same count that came
// in. Which rows exist and where their experts' outputs are comes from the dispatch's
// RecvRoute, so the same kernel serves the forward pass and, later, the backward pass.
#include "ep_device.cuh"

namespace moe_a2a {
namespace {

// Backward of dispatch only: every rank says "my comb_x is free" (its previous round ended
// before this kernel started, on the same stream) and waits until every rank has said so.
// In a forward round the dispatch half of the round plays this part.
MOE_A2A_DEVICE bool await_all_ready(const EpContext& c, const EpBuffers& b, uint32_t epoch) {
  if (blockIdx.x == 0 && threadIdx.x < c.cfg.world) {
    st_release_sys(b.dispatch_flag(threadIdx.x, c.cfg.rank), make_flag(epoch, round_error_bit(b)));
  }
  return wait_for_sources(c, b.dispatch_flag(c.cfg.rank, 0), epoch, ErrorCode::kDispatchTimeout, kCombineSend);
}

template <TokenType kType>
__global__ void __launch_bounds__(kEpBlock) combine_send_kernel(EpContext c, CombineSendArgs a) {
  __shared__ int first_row[kMaxWorld + 1];
  __shared__ int pos[kRowBatch][kMaxTopk];
  __shared__ float weight[kRowBatch][kMaxTopk];
  __shared__ int token[kRowBatch];
  MOE_A2A_PROFILE_TRACK(prof, c.profiler, kCombineSend);

  const EpBuffers b{c};
  const EpConfig& cfg = c.cfg;
  const int me = cfg.rank;
  const uint32_t epoch = b.current_epoch();

  if (a.await_ready && !await_all_ready(c, b, epoch)) return;  // timed out: engine failed
  load_route_rows(c, a.route, first_row);

  const BlockRows rows = block_rows(first_row[cfg.world]);
  const int vecs = b.vecs_per_row();
  const int chunks = chunks_per_row(vecs);
  const Vec16* y = static_cast<const Vec16*>(a.expert_y);
  for (int batch = rows.begin; batch < rows.end; batch += kRowBatch) {
    const int n = min(kRowBatch, rows.end - batch);
    MOE_A2A_PROFILE(const uint64_t gather_start = prof.now());
    for (int j = threadIdx.x; j < n * cfg.topk; j += blockDim.x) {
      const int r = j / cfg.topk, k = j % cfg.topk;
      int src, slot;
      row_source(first_row, cfg.world, batch + r, src, slot);
      const size_t row = b.row_index(src, slot);
      int p = a.route.pos[row * cfg.topk + k];
      if (static_cast<size_t>(p) >= cfg.output_rows()) p = -1;  // also p < 0; see load_route_rows
      pos[r][k] = p;
      weight[r][k] = a.expert_weights == nullptr || p < 0 ? 1.0f : a.expert_weights[p];
      if (k == 0) token[r] = a.route.token[row];
    }
    __syncthreads();
    MOE_A2A_PROFILE(if (wave_id() == 0) prof.record(ProfilerEvent::kCombineSendGather, gather_start, batch));
    // Tasks (row, chunk): sum the row's local experts' outputs for this chunk, k ascending.
    for (int task = wave_id(); task < n * chunks; task += kWavesPerBlock) {
      const int r = task / chunks, chunk = task % chunks;
      // The token index came from a peer: never let it address outside comb_x.
      if (token[r] < 0 || token[r] >= cfg.max_tokens) continue;
      MOE_A2A_PROFILE(const uint64_t copy_start = prof.now());
      float acc[kUnroll][8] = {};
      for (int k = 0; k < cfg.topk; ++k) {
        const int p = pos[r][k];
        if (p < 0) continue;
        Vec16 v[kUnroll];
        load_chunk(y + static_cast<size_t>(p) * vecs, chunk, vecs, v);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) fma_vec<kType>(acc[u], weight[r][k], v[u]);
      }
      Vec16 packed[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) packed[u] = pack_vec<kType>(acc[u]);
      int src, slot;
      row_source(first_row, cfg.world, batch + r, src, slot);
      store_chunk(b.comb_x(src, me, token[r]), chunk, vecs, packed);
      MOE_A2A_PROFILE(prof.record(ProfilerEvent::kCombineSendCopy, copy_start, src));
    }
    __syncthreads();  // pos/weight/token are rewritten by the next batch
  }

  // The last block tells every rank (also those that sent us nothing) that our partial sums
  // for this call are in place.
  MOE_A2A_PROFILE_SPAN(publish_span, prof, kCombineSendPublish, 0, wave_id() == 0);
  if (last_block_done(b.done_counter(kCombineSend))) {
    MOE_A2A_PROFILE(publish_span.set_arg(1));
    publish_combine_flags(b, epoch);
  }
}

}  // namespace

void launch_combine_send(const EpContext& ctx, const CombineSendArgs& args, hipStream_t stream) {
  MOE_A2A_DISPATCH_TOKEN_TYPE(ctx.token_type, kType,
                              (combine_send_kernel<kType><<<ctx.num_blocks, kEpBlock, 0, stream>>>(ctx, args)));
  MOE_A2A_GPU_CHECK(hipGetLastError());
}

}  // namespace moe_a2a
