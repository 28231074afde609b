// Combine-send: for every row this rank received in dispatch, sums the outputs of the row's
// local experts weighted by the router, in fp32 and in ascending k, and stores that one
// partial sum straight into the source rank's comb_x at the source token's index. One row
// goes back per (token, expert rank), the same count that came in.
#include "ep_device.cuh"

namespace moe_a2a {
namespace {

template <TokenType kType>
__global__ void __launch_bounds__(kEpBlock) combine_send_kernel(EpContext c, CombineSendArgs a) {
  __shared__ int first_row[kMaxWorld + 1];
  __shared__ int pos[kMaxTopk];
  __shared__ float weight[kMaxTopk];

  const EpBuffers b{c};
  const EpConfig& cfg = c.cfg;
  const int me = cfg.rank;
  const uint32_t epoch = b.current_epoch();

  // Row counts were acquired by dispatch-recv of this call; the flags still hold them
  // because no source can start its next dispatch before our combine flag reaches it.
  if (threadIdx.x == 0) {
    int sum = 0;
    for (int r = 0; r < cfg.world; ++r) {
      first_row[r] = sum;
      const uint64_t f = ld_relaxed_sys(b.dispatch_flag(me, r));
      sum += flag_epoch(f) == epoch ? static_cast<int>(min(flag_payload(f) & kFlagCountMask, static_cast<uint32_t>(cfg.max_tokens))) : 0;
    }
    first_row[cfg.world] = sum;
  }
  __syncthreads();

  const int total_rows = first_row[cfg.world];
  const int vecs = b.vecs_per_row();
  const Vec16* y = static_cast<const Vec16*>(a.expert_y);
  for (int g = blockIdx.x; g < total_rows; g += gridDim.x) {
    int src = 0;
    while (g >= first_row[src + 1]) ++src;
    const int slot = g - first_row[src];
    if (threadIdx.x < cfg.topk) {
      const int k = threadIdx.x;
      pos[k] = b.row_pos(src, slot)[k];
      weight[k] = b.recv_weight(me, src, slot)[k];
    }
    __syncthreads();
    const int token = *b.recv_token(me, src, slot);
    Vec16* dst = b.comb_x(src, me, token);
    for (int v = threadIdx.x; v < vecs; v += blockDim.x) {
      float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      for (int k = 0; k < cfg.topk; ++k) {
        if (pos[k] >= 0) fma_vec<kType>(acc, weight[k], y[static_cast<size_t>(pos[k]) * vecs + v]);
      }
      dst[v] = pack_vec<kType>(acc);
    }
    __syncthreads();  // pos[]/weight[] are rewritten for the next row
  }

  // The last block tells every rank (also those that sent us nothing) that our partial sums
  // for this call are in place.
  if (last_block_done(b.done_counter(kCombineSend))) {
    if (threadIdx.x < cfg.world) {
      const uint32_t err = ld_relaxed_sys(b.round_error()) != 0 ? kFlagErrorBit : 0u;
      st_release_sys(b.combine_flag(threadIdx.x, me), make_flag(epoch, err));
    }
  }
}

}  // namespace

void launch_combine_send(const EpContext& ctx, const CombineSendArgs& args, hipStream_t stream) {
  MOE_A2A_DISPATCH_TOKEN_TYPE(ctx.token_type, kType,
                              (combine_send_kernel<kType><<<ctx.num_blocks, kEpBlock, 0, stream>>>(ctx, args)));
  MOE_A2A_GPU_CHECK(hipGetLastError());
}

}  // namespace moe_a2a
