// One symmetric heap per rank: the same size everywhere, allocated outside torch's caching
// allocator, exported as an IPC handle and opened by every peer. Lifetime is two-phase:
//   SymmetricHeap h(rank, world, bytes, device);   // allocate + zero
//   std::string mine = h.export_handle();          // bytes to all-gather
//   h.open_peers(all_handles);                     // map every peer's heap
//   ... h.view() / h.allocate() ...
//   h.close(timeout_s);                            // handshake, unmap peers, free
// The torch-free core: the Python wrapper does the exchange through torch.distributed; after
// open_peers nothing here needs a process group. close() agrees with the peers over the heap
// itself: past every rank's heap lies a small control area (kControlBytes, outside what
// allocate() hands out) where rank s sets closed[s] once none of its work touches that rank's
// memory any more, and a rank frees its memory only after every peer has set its word (or the
// wait timed out: a peer that exited or never closes).
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
  // Waits for this device's work, tells every peer that this rank no longer touches its
  // memory, waits up to timeout_s until every peer has said the same (the waits run on the
  // device, bounded), then unmaps the peers and frees the heap. Needs no process group.
  // Returns the ranks that did not answer in time (bit r for rank r; 0 when all did); the
  // memory is freed either way. Idempotent: returns 0 once closed.
  uint32_t close(double timeout_s);

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

  // Bytes of the control area past the heap: closed[kMaxWorld] words, padded.
  static constexpr size_t kControlBytes = 256;

  HeapView view_{};
  int device_ = 0;
  void* local_alloc_ = nullptr;     // what was malloc'ed (the heap starts here)
  std::vector<void*> peer_allocs_;  // what hipIpcOpenMemHandle returned, per rank
  HeapView* device_view_ = nullptr;
  BumpAllocator allocator_;
  bool peers_open_ = false;
  bool closed_ = false;
};

}  // namespace moe_a2a
