// Several small output tensors cut from one allocation.
//
// Each at::empty is a dispatched op and a caching-allocator call, and a dispatch returns ten
// tensors: with one allocation for nine of them, a dispatch's host time fell by about 30% (1 x
// H100 host, docs/results/2026-11-25-h100-output-pool/). An OutputPool makes that allocation and
// gives each tensor a TensorImpl of its own over its storage (no dispatcher, no allocator): the
// tensors do not overlap, are not views of one another (autograd sees independent tensors, each
// with its own version counter), and the memory lives as long as any of them does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <torch/types.h>

namespace moe_a2a {

class OutputPool {
 public:
  // Every tensor starts at a multiple of this many bytes (the kernels' 16-byte vector loads,
  // and whole cache lines per tensor).
  static constexpr size_t kAlign = 256;

  // Reserves room for a tensor of `shape` and `dtype`; take() returns it, in the same order.
  void plan(std::vector<int64_t> shape, at::ScalarType dtype) {
    pieces_.push_back(Piece{std::move(shape), dtype, total_});
    total_ += round_up(bytes_of(pieces_.back()));
  }

  // The one allocation; then take() once per plan(), in order.
  void allocate(at::Device device) {
    storage_ = at::empty({static_cast<int64_t>(total_)}, at::TensorOptions().device(device).dtype(at::kByte));
  }

  at::Tensor take() {
    TORCH_CHECK(next_ < pieces_.size() && storage_.defined(), "OutputPool: take() without a plan() for it");
    const Piece& p = pieces_[next_++];
    at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(storage_.storage()), storage_.key_set(),
                                                            c10::scalarTypeToTypeMeta(p.dtype));
    c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    impl->set_sizes_contiguous(p.shape);
    impl->set_storage_offset(static_cast<int64_t>(p.offset / c10::elementSize(p.dtype)));
    return t;
  }

 private:
  struct Piece {
    std::vector<int64_t> shape;
    at::ScalarType dtype;
    size_t offset;  // bytes from the start of the allocation
  };
  static size_t bytes_of(const Piece& p) {
    size_t n = c10::elementSize(p.dtype);
    for (const int64_t d : p.shape) n *= static_cast<size_t>(d);
    return n;
  }
  static size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

  std::vector<Piece> pieces_;
  size_t total_ = 0;
  size_t next_ = 0;
  at::Tensor storage_;
};

}  // namespace moe_a2a
