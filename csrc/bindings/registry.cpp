#include "registry.h"

#include <mutex>
#include <unordered_map>

namespace moe_a2a {
namespace {

struct Entry {
  std::shared_ptr<EpEngine> engine;
  at::ScalarType dtype;
};

std::mutex g_mutex;
std::unordered_map<int64_t, Entry> g_engines;
int64_t g_next_id = 1;

Entry& entry(int64_t id) {
  auto it = g_engines.find(id);
  MOE_A2A_TORCH_CHECK(it != g_engines.end(), "moe_a2a: no all-to-all with id ", id, " (closed, or never created)");
  return it->second;
}

}  // namespace

int64_t register_engine(std::shared_ptr<EpEngine> engine, at::ScalarType dtype) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const int64_t id = g_next_id++;
  g_engines.emplace(id, Entry{std::move(engine), dtype});
  return id;
}

void unregister_engine(int64_t id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_engines.erase(id);
}

EpEngine& engine_by_id(int64_t id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return *entry(id).engine;
}

at::ScalarType engine_dtype(int64_t id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return entry(id).dtype;
}

std::string shape_str(at::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += cat(i ? ", " : "", shape[i]);
  return s + "]";
}

}  // namespace moe_a2a
