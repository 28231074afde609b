// One symmetric heap per rank: the same size everywhere, allocated outside torch's caching
// allocator, exported as an IPC handle and opened by every peer. Lifetime is two-phase:
//   SymmetricHeap h(rank, world, bytes, device);   // allocate + zero
//   std::string mine = h.export_handle();          // bytes to all-gather
//   h.open_peers(all_handles);                     // map every peer's heap
//   ... h.view() / h.allocate() ...
//   h.close();                                     // unmap peers, free; the destructor does it too
// The torch-free core: the Python wrapper does the exchange through torch.distributed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bump_allocator.h"
#include "moe_a2a/heap.h"

namespace moe_a2a {

class SymmetricHeap {
 public:
  SymmetricHeap(int rank, int world, size_t bytes, int device);
  ~SymmetricHeap();
  SymmetricHeap(const SymmetricHeap&) = delete;
  SymmetricHeap& operator=(const SymmetricHeap&) = delete;

  // IPC handle of the local heap plus the offset of the heap inside that allocation and its
  // size, as opaque bytes for the exchange.
  std::string export_handle() const;
  // handles[r] is rank r's export_handle(); the local entry is checked, not opened.
  void open_peers(const std::vector<std::string>& handles);
  void close();

  // Offset of a new object; every rank must make the same calls in the same order.
  size_t allocate(size_t bytes, size_t align) { return allocator_.allocate(bytes, align); }
  uint64_t fingerprint() const { return allocator_.fingerprint(); }
  size_t used() const { return allocator_.used(); }

  const HeapView& view() const { return view_; }
  // A copy of view() in device memory, for kernels that take a pointer to it.
  const HeapView* device_view() const { return device_view_; }
  int rank() const { return view_.rank; }
  int world() const { return view_.world; }
  int device() const { return device_; }
  size_t bytes() const { return view_.bytes; }
  bool is_open() const { return peers_open_; }
  bool is_closed() const { return closed_; }

  // Live heaps and open peer mappings in this process, for leak tests.
  static int live_heaps();
  static int open_mappings();

 private:
  void check_usable(const char* what) const;

  HeapView view_{};
  int device_ = 0;
  void* local_alloc_ = nullptr;  // what was malloc'ed (the heap starts here)
  std::vector<void*> peer_allocs_;  // what hipIpcOpenMemHandle returned, per rank
  HeapView* device_view_ = nullptr;
  BumpAllocator allocator_;
  bool peers_open_ = false;
  bool closed_ = false;
};

}  // namespace moe_a2a
