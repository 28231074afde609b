#include "registry.h"

#include <mutex>
#include <unordered_map>

namespace moe_a2a {
namespace {

struct Entry {
  std::shared_ptr<EpEngine> engine;  // null: shapes only (register_shapes_only)
  EpConfig config;
  at::ScalarType dtype;
};

std::mutex g_mutex;
std::unordered_map<int64_t, Entry> g_engines;
uint32_t g_next_serial = 1;

// torch.compile caches what it compiles on disk, shared by every process of the machine and
// kept across runs, keyed by the graph's code, in which an engine's id is a constant; the Meta
// kernels take output shapes from the engine with that id. So one id must never name engines
// whose outputs differ, not even in two processes: bits 24..62 are a hash of the configuration
// and dtype (EpConfig::fingerprint; the same on every rank), bits 0..23 a serial number.
// (Serial numbers alone were 1, 2, ... in every process: a graph compiled at world 4 was taken
// from the cache, with world 4's shapes, by a run at world 8.)
constexpr int kSerialBits = 24;
int64_t make_id(const EpConfig& c, at::ScalarType dtype, uint32_t serial) {
  const uint64_t hash = c.fingerprint(static_cast<uint64_t>(dtype)) >> (64 - 63 + kSerialBits);
  return static_cast<int64_t>((hash << kSerialBits) | (serial & ((1u << kSerialBits) - 1)));
}

Entry& entry(int64_t id) {
  auto it = g_engines.find(id);
  MOE_A2A_TORCH_CHECK(it != g_engines.end(), "moe_a2a: no all-to-all with id ", id, " (closed, or never created)");
  return it->second;
}

int64_t register_entry(Entry e) {
  std::lock_guard<std::mutex> lock(g_mutex);
  int64_t id = make_id(e.config, e.dtype, g_next_serial++);
  while (g_engines.count(id) != 0) id = make_id(e.config, e.dtype, g_next_serial++);  // after 2^24 engines
  g_engines.emplace(id, std::move(e));
  return id;
}

}  // namespace

int64_t register_engine(std::shared_ptr<EpEngine> engine, at::ScalarType dtype) {
  const EpConfig config = engine->config();
  return register_entry(Entry{std::move(engine), config, dtype});
}

int64_t register_shapes_only(const EpConfig& config, at::ScalarType dtype) {
  return register_entry(Entry{nullptr, config, dtype});
}

void unregister_engine(int64_t id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_engines.erase(id);
}

EpEngine& engine_by_id(int64_t id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const Entry& e = entry(id);
  MOE_A2A_TORCH_CHECK(e.engine != nullptr, "moe_a2a: the all-to-all with id ", id,
                      " has shapes only (a test's, for the Meta kernels): it cannot run");
  return *e.engine;
}

EpConfig config_by_id(int64_t id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return entry(id).config;
}

at::ScalarType engine_dtype(int64_t id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return entry(id).dtype;
}

TokenType token_type(at::ScalarType t) {
  if (t == at::kBFloat16) return TokenType::kBFloat16;
  if (t == at::kHalf) return TokenType::kFloat16;
  return TokenType::kFloat32;
}

std::string shape_str(at::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += cat(i ? ", " : "", shape[i]);
  return s + "]";
}

}  // namespace moe_a2a
