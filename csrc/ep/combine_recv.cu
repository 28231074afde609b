// Combine-recv: waits for every rank's partial sums, then out[t] = sum over the expert ranks
// token t went to, in ascending rank order, in fp32, cast once to the token type. The order
// is fixed, so identical inputs give bitwise identical outputs whatever the arrival order.
// Ends the round (forward, or backward of dispatch).
#include "ep_device.cuh"

namespace moe_a2a {
namespace {

template <TokenType kType>
__global__ void __launch_bounds__(kEpBlock) combine_recv_kernel(EpContext c, CombineRecvArgs a) {
  MOE_A2A_PROFILE_TRACK(prof, c.profiler, kCombineRecv);
  const EpBuffers b{c};
  const EpConfig& cfg = c.cfg;
  const int me = cfg.rank;
  const uint32_t epoch = b.current_epoch();

  MOE_A2A_PROFILE(const uint64_t wait_start = prof.now());
  // A timed-out block leaves the output unwritten; the engine is failed.
  if (!wait_for_sources(c, b.combine_flag(me, 0), epoch, ErrorCode::kCombineTimeout, kCombineRecv)) return;
  MOE_A2A_PROFILE(prof.record_wait(ProfilerEvent::kCombineRecvWait, wait_start, cfg.world));

  // Tasks (token, chunk) over every wave of the grid.
  const int vecs = b.vecs_per_row();
  const int chunks = chunks_per_row(vecs);
  Vec16* out = static_cast<Vec16*>(a.out);
  const int waves = gridDim.x * kWavesPerBlock;
  for (int task = blockIdx.x * kWavesPerBlock + wave_id(); task < a.route.num_tokens * chunks; task += waves) {
    const int t = task / chunks, chunk = task % chunks;
    const uint32_t mask = static_cast<uint32_t>(a.route.dest_mask[t]);
    MOE_A2A_PROFILE_SPAN(reduce_span, prof, kCombineRecvReduce, t);
    float acc[kUnroll][8] = {};
    for (int r = 0; r < cfg.world; ++r) {
      if (!((mask >> r) & 1u)) continue;
      Vec16 v[kUnroll];
      load_chunk(b.comb_x(me, r, t), chunk, vecs, v);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) fma_vec<kType>(acc[u], 1.0f, v[u]);
    }
    Vec16 packed[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) packed[u] = pack_vec<kType>(acc[u]);
    store_chunk(out + static_cast<size_t>(t) * vecs, chunk, vecs, packed);
  }

  if (last_block_done(b.done_counter(kCombineRecv))) end_round(b);
}

}  // namespace

void launch_combine_recv(const EpContext& ctx, const CombineRecvArgs& args, hipStream_t stream) {
  MOE_A2A_CHECK(args.route.num_tokens >= 0 && args.route.num_tokens <= ctx.cfg.max_tokens,
                "combine: num_tokens ", args.route.num_tokens, " outside [0, ", ctx.cfg.max_tokens, "]");
  MOE_A2A_DISPATCH_TOKEN_TYPE(ctx.token_type, kType,
                              (combine_recv_kernel<kType><<<ctx.num_blocks, kEpBlock, 0, stream>>>(ctx, args)));
  MOE_A2A_GPU_CHECK(hipGetLastError());
}

}  // namespace moe_a2a
