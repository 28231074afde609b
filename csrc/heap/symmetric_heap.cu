#include "symmetric_heap.h"

#include <atomic>
#include <cstdio>
#include <cstring>

#include "moe_a2a/platform/device.h"
#include "moe_a2a/platform/device_guard.h"
#include "moe_a2a/platform/runtime.h"
#include "moe_a2a/platform/sync.h"

namespace moe_a2a {
namespace {

std::atomic<int> g_live_heaps{0};
std::atomic<int> g_open_mappings{0};

// How long a heap destroyed without close() waits for its peers to close theirs.
constexpr double kDestructorCloseTimeoutS = 10.0;

constexpr uint32_t kHandleMagic = 0x6d6f6548;  // "Heom"
constexpr uint32_t kHandleVersion = 1;

// What travels between ranks. A handle names the whole allocation on both vendors, so the
// offset of the heap inside it is sent alongside (0 today: the heap is its own allocation).
struct ExportedHandle {
  uint32_t magic;
  uint32_t version;
  int32_t rank;
  int32_t world;
  uint64_t offset;
  uint64_t bytes;
  hipIpcMemHandle_t handle;
};

// closed[src] in `owner`'s control area (past its heap): rank src no longer touches owner's
// memory. Zero from the allocation's memset until src closes; heaps are closed once.
MOE_A2A_DEVICE uint64_t* closed_word(const HeapView& v, int owner, int src) {
  return reinterpret_cast<uint64_t*>(v.bases[owner] + v.bytes) + src;
}

// One thread per peer: says "closed" on the peer, then waits (bounded) for the peer's word here.
__global__ void close_handshake_kernel(HeapView v, uint64_t timeout_ticks, uint32_t* missing) {
  const int peer = static_cast<int>(threadIdx.x);
  if (peer >= v.world || peer == v.rank) return;
  st_release_sys(closed_word(v, peer, v.rank), uint64_t{1});
  uint64_t seen = 0;
  if (!wait_until_at_least_sys(closed_word(v, v.rank, peer), uint64_t{1}, timeout_ticks, &seen)) {
    atomicOr(missing, 1u << peer);
  }
}

}  // namespace

static_assert(kMaxWorld * sizeof(uint64_t) <= 256, "closed[] fits the control area");
static_assert(kMaxWorld <= kWaveSize, "close_handshake_kernel: a lane per peer in one wave");

SymmetricHeap::SymmetricHeap(int rank, int world, size_t bytes, int device) : device_(device), allocator_(bytes) {
  MOE_A2A_CHECK(world >= 1 && world <= kMaxWorld, "world size must be in [1, ", kMaxWorld, "], got ", world);
  MOE_A2A_CHECK(rank >= 0 && rank < world, "rank ", rank, " outside world of ", world);
  MOE_A2A_CHECK(bytes > 0, "symmetric heap size must be positive");
  const DeviceGuard on_device(device);
  local_alloc_ = allocate_peer_visible(bytes + kControlBytes);
  // Zero before anyone can see it: flags start below every epoch, and the exchange that
  // follows (a collective) orders this memset before any peer's first write.
  MOE_A2A_GPU_CHECK(hipMemset(local_alloc_, 0, bytes + kControlBytes));
  MOE_A2A_GPU_CHECK(hipDeviceSynchronize());
  view_.rank = rank;
  view_.world = world;
  view_.bytes = bytes;
  for (auto& b : view_.bases) b = nullptr;
  view_.bases[rank] = static_cast<uint8_t*>(local_alloc_);
  peer_allocs_.assign(world, nullptr);
  g_live_heaps++;
}

SymmetricHeap::~SymmetricHeap() {
  if (!closed_) {
    std::fprintf(stderr, "moe_a2a: SymmetricHeap of rank %d destroyed without close(); closing now\n", view_.rank);
    try {
      close(kDestructorCloseTimeoutS);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "moe_a2a: closing SymmetricHeap failed: %s\n", e.what());
    }
  }
}

void SymmetricHeap::check_usable(const char* what) const {
  MOE_A2A_CHECK(!closed_, "SymmetricHeap.", what, " called after close()");
}

std::string SymmetricHeap::export_handle() const {
  check_usable("export_handle");
  ExportedHandle h{};
  h.magic = kHandleMagic;
  h.version = kHandleVersion;
  h.rank = view_.rank;
  h.world = view_.world;
  h.offset = 0;
  h.bytes = view_.bytes;
  const DeviceGuard on_device(device_);
  MOE_A2A_GPU_CHECK(hipIpcGetMemHandle(&h.handle, local_alloc_));
  return std::string(reinterpret_cast<const char*>(&h), sizeof(h));
}

void SymmetricHeap::open_peers(const std::vector<std::string>& handles) {
  check_usable("open_peers");
  MOE_A2A_CHECK(!peers_open_, "SymmetricHeap peers are already open");
  MOE_A2A_CHECK(static_cast<int>(handles.size()) == view_.world, "expected ", view_.world, " heap handles, got ",
                handles.size());
  const DeviceGuard on_device(device_);
  for (int r = 0; r < view_.world; ++r) {
    ExportedHandle h{};
    MOE_A2A_CHECK(handles[r].size() == sizeof(h), "heap handle of rank ", r, " has ", handles[r].size(),
                  " bytes, expected ", sizeof(h));
    std::memcpy(&h, handles[r].data(), sizeof(h));
    MOE_A2A_CHECK(h.magic == kHandleMagic && h.version == kHandleVersion, "heap handle of rank ", r,
                  " is not a moe_a2a heap handle (or another version)");
    MOE_A2A_CHECK(h.rank == r && h.world == view_.world, "heap handle ", r, " came from rank ", h.rank, " of world ",
                  h.world);
    MOE_A2A_CHECK(h.bytes == view_.bytes, "symmetric heaps differ in size: rank ", view_.rank, " has ", view_.bytes,
                  " bytes, rank ", r, " has ", h.bytes);
    if (r == view_.rank) continue;  // opening our own handle fails; use the local pointer
    void* p = nullptr;
    MOE_A2A_GPU_CHECK(hipIpcOpenMemHandle(&p, h.handle, hipIpcMemLazyEnablePeerAccess));
    peer_allocs_[r] = p;
    g_open_mappings++;
    view_.bases[r] = static_cast<uint8_t*>(p) + h.offset;
  }
  MOE_A2A_GPU_CHECK(hipMalloc(reinterpret_cast<void**>(&device_view_), sizeof(HeapView)));
  MOE_A2A_GPU_CHECK(hipMemcpy(device_view_, &view_, sizeof(HeapView), hipMemcpyHostToDevice));
  peers_open_ = true;
}

uint32_t SymmetricHeap::close(double timeout_s) {
  if (closed_) return 0;
  const DeviceGuard on_device(device_);
  // This rank's kernels may still be using the mappings (and peers' kernels ours): finish
  // ours, then agree with the peers before anything is unmapped or freed.
  MOE_A2A_GPU_CHECK(hipDeviceSynchronize());
  uint32_t missing = 0;
  if (peers_open_ && view_.world > 1) {
    uint32_t* flag = nullptr;
    MOE_A2A_GPU_CHECK(hipMalloc(reinterpret_cast<void**>(&flag), sizeof(uint32_t)));
    MOE_A2A_GPU_CHECK(hipMemset(flag, 0, sizeof(uint32_t)));
    const double seconds = timeout_s > 0 ? timeout_s : 0.0;
    const auto ticks = static_cast<uint64_t>(seconds * wall_clock_rate_hz(device_));
    close_handshake_kernel<<<1, kWaveSize>>>(view_, ticks, flag);  // one wave, a lane per peer
    const hipError_t launched = hipGetLastError();
    if (launched == hipSuccess) {
      MOE_A2A_GPU_CHECK(hipMemcpy(&missing, flag, sizeof(missing), hipMemcpyDeviceToHost));
    } else {
      missing = ((1u << view_.world) - 1u) & ~(1u << view_.rank);  // no handshake: nobody answered
    }
    MOE_A2A_GPU_CHECK(hipFree(flag));
  }
  for (int r = 0; r < static_cast<int>(peer_allocs_.size()); ++r) {
    if (peer_allocs_[r] == nullptr) continue;
    MOE_A2A_GPU_CHECK(hipIpcCloseMemHandle(peer_allocs_[r]));
    peer_allocs_[r] = nullptr;
    g_open_mappings--;
  }
  if (device_view_ != nullptr) MOE_A2A_GPU_CHECK(hipFree(device_view_));
  device_view_ = nullptr;
  if (local_alloc_ != nullptr) MOE_A2A_GPU_CHECK(hipFree(local_alloc_));
  local_alloc_ = nullptr;
  for (auto& b : view_.bases) b = nullptr;
  closed_ = true;
  peers_open_ = false;
  g_live_heaps--;
  return missing;
}

int SymmetricHeap::live_heaps() { return g_live_heaps.load(); }
int SymmetricHeap::open_mappings() { return g_open_mappings.load(); }

}  // namespace moe_a2a
