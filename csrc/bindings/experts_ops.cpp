// The experts' small-rows linear layer as a torch op (csrc/experts/grouped_gemv.h):
//   grouped_gemv(x [rows, in], w [E, out, in] contiguous along in or along out, offsets [E + 1]
//                int32, counts [E] int32, rows_per_pass = 0 (automatic), 1, 2 or 4,
//                swiglu = false) -> y [rows, out], or with swiglu [rows, out / 2]
// swiglu: w's columns are gate then up (w contiguous along in, out even) and y their SwiGLU
// (csrc/experts/grouped_gemv.h). y is a fresh tensor of torch's allocator on the current stream;
// the rows of no expert are left as allocated (undefined), as torch._grouped_mm leaves them. No
// autograd: the Python caller (moe_a2a.grouped_gemv) uses it where no gradient is asked for.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "experts/grouped_gemv.h"
#include "registry.h"

namespace moe_a2a {
namespace {

void check_gemv_dtype(const at::Tensor& x) {
  const at::ScalarType t = x.scalar_type();
  MOE_A2A_TORCH_CHECK(t == at::kBFloat16 || t == at::kHalf || t == at::kFloat,
                      "moe_a2a.grouped_gemv: x must be bfloat16, float16 or float32, got ", c10::toString(t));
}

bool aligned16(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

void check_gemv_args(const at::Tensor& x, const at::Tensor& w, const at::Tensor& offsets, const at::Tensor& counts,
                     int64_t rows_per_pass, bool swiglu) {
  check_gemv_dtype(x);  // first: the other checks compare against it
  MOE_A2A_TORCH_CHECK(x.dim() == 2, "moe_a2a.grouped_gemv: x must be [rows, in], got ", shape_str(x.sizes()));
  MOE_A2A_TORCH_CHECK(w.dim() == 3, "moe_a2a.grouped_gemv: w must be [experts, out, in], got ", shape_str(w.sizes()));
  const int64_t experts = w.size(0), in = x.size(1);
  MOE_A2A_TORCH_CHECK(experts <= kGemvMaxExperts, "moe_a2a.grouped_gemv: w has ", experts, " experts, more than the ",
                      kGemvMaxExperts, " one call takes");
  MOE_A2A_TORCH_CHECK(w.size(2) == in, "moe_a2a.grouped_gemv: w is ", shape_str(w.sizes()), " but x has ", in,
                      " columns: w must be [experts, out, in]");
  MOE_A2A_TORCH_CHECK(w.scalar_type() == x.scalar_type(), "moe_a2a.grouped_gemv: w is ", c10::toString(w.scalar_type()),
                      " but x is ", c10::toString(x.scalar_type()));
  MOE_A2A_TORCH_CHECK(counts.dim() == 1 && counts.size(0) == experts && counts.scalar_type() == at::kInt,
                      "moe_a2a.grouped_gemv: counts must be int32 [", experts, "], got ",
                      c10::toString(counts.scalar_type()), " ", shape_str(counts.sizes()));
  MOE_A2A_TORCH_CHECK(offsets.dim() == 1 && offsets.size(0) >= experts && offsets.scalar_type() == at::kInt,
                      "moe_a2a.grouped_gemv: offsets must be int32 with at least ", experts, " entries, got ",
                      c10::toString(offsets.scalar_type()), " ", shape_str(offsets.sizes()));
  MOE_A2A_TORCH_CHECK(rows_per_pass == 0 || rows_per_pass == 1 || rows_per_pass == 2 || rows_per_pass == 4,
                      "moe_a2a.grouped_gemv: rows_per_pass must be 0 (automatic), 1, 2 or 4, got ", rows_per_pass);
  for (const auto* t : {&x, &w, &offsets, &counts}) {
    MOE_A2A_TORCH_CHECK(t->is_cuda() && t->get_device() == x.get_device(),
                        "moe_a2a.grouped_gemv: x, w, offsets and counts must be on one GPU, got ", x.device().str(),
                        ", ", w.device().str(), ", ", offsets.device().str(), ", ", counts.device().str());
  }
  MOE_A2A_TORCH_CHECK(offsets.is_contiguous() && counts.is_contiguous(),
                      "moe_a2a.grouped_gemv: offsets and counts must be contiguous");
  // 16-byte vectors along `in`, for x and for every (expert, column) of w
  const int64_t vec = 16 / x.element_size();
  MOE_A2A_TORCH_CHECK(in % vec == 0, "moe_a2a.grouped_gemv: in (", in, ") must be a multiple of ", vec, " for ",
                      c10::toString(x.scalar_type()));
  MOE_A2A_TORCH_CHECK(x.stride(1) == 1 && x.stride(0) % vec == 0 && aligned16(x),
                      "moe_a2a.grouped_gemv: x's rows must be contiguous and start on 16 bytes");
  // w contiguous along in (nn.Linear's layout per expert) or along out (w[e] = a [in, out] matrix's transpose)
  const bool in_contiguous = w.stride(2) == 1 && w.stride(1) % vec == 0;
  const bool out_contiguous = w.stride(1) == 1 && w.stride(2) % vec == 0 && w.size(1) % vec == 0;
  MOE_A2A_TORCH_CHECK((in_contiguous || out_contiguous) && w.stride(0) % vec == 0 && aligned16(w),
                      "moe_a2a.grouped_gemv: w [experts, out, in] must be contiguous along in (nn.Linear's layout "
                      "per expert) or along out (the transpose of [experts, in, out]; then out a multiple of ",
                      vec, ") and start on 16 bytes; got shape ", shape_str(w.sizes()), ", strides ",
                      shape_str(w.strides()));
  MOE_A2A_TORCH_CHECK(!swiglu || (in_contiguous && w.size(1) % 2 == 0),
                      "moe_a2a.grouped_gemv: swiglu takes w [experts, 2 x intermediate, in] contiguous along in (gate "
                      "columns, then up), got shape ",
                      shape_str(w.sizes()), ", strides ", shape_str(w.strides()));
}

int64_t y_columns(const at::Tensor& w, bool swiglu) { return swiglu ? w.size(1) / 2 : w.size(1); }

at::Tensor grouped_gemv(const at::Tensor& x, const at::Tensor& w, const at::Tensor& offsets, const at::Tensor& counts,
                        int64_t rows_per_pass, bool swiglu) {
  check_gemv_args(x, w, offsets, counts, rows_per_pass, swiglu);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty({x.size(0), y_columns(w, swiglu)}, x.options());
  if (x.size(0) == 0 || w.size(0) == 0 || w.size(1) == 0) return y;
  GroupedGemv g{};
  g.x = x.data_ptr();
  g.w = w.data_ptr();
  g.y = y.data_ptr();
  g.offsets = offsets.data_ptr<int32_t>();
  g.counts = counts.data_ptr<int32_t>();
  g.rows = x.size(0);
  g.x_row_stride = x.stride(0);
  g.w_expert_stride = w.stride(0);
  g.w_out_stride = w.stride(1);
  g.w_in_stride = w.stride(2);
  g.experts = static_cast<int32_t>(w.size(0));
  g.in = static_cast<int32_t>(x.size(1));
  g.out = static_cast<int32_t>(w.size(1));
  g.type = token_type(x.scalar_type());
  g.swiglu = swiglu;
  launch_grouped_gemv(g, static_cast<int>(rows_per_pass), at::cuda::getCurrentCUDAStream(x.get_device()).stream());
  return y;
}

at::Tensor grouped_gemv_meta(const at::Tensor& x, const at::Tensor& w, const at::Tensor&, const at::Tensor&, int64_t,
                             bool swiglu) {
  return at::empty({x.size(0), y_columns(w, swiglu)}, x.options());
}

}  // namespace
}  // namespace moe_a2a

TORCH_LIBRARY_FRAGMENT(moe_a2a, m) {
  m.def(
      "grouped_gemv(Tensor x, Tensor w, Tensor offsets, Tensor counts, int rows_per_pass=0, bool swiglu=False) -> "
      "Tensor");
}
TORCH_LIBRARY_IMPL(moe_a2a, CUDA, m) { m.impl("grouped_gemv", &moe_a2a::grouped_gemv); }
TORCH_LIBRARY_IMPL(moe_a2a, Meta, m) { m.impl("grouped_gemv", &moe_a2a::grouped_gemv_meta); }
