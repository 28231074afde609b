// Error messages built without std::ostream. Streaming an integer formats it through the
// global locale's num_put facet; on the GPU test machines that crashed inside this extension
// (another library in the process had replaced the global C++ locale), so every message of
// the library is built here: integers through std::to_chars, which needs no locale.
#pragma once

#include <charconv>
#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>

namespace moe_a2a {

inline void append(std::string& s, std::string_view v) { s.append(v.data(), v.size()); }
inline void append(std::string& s, const char* v) { s += v; }
inline void append(std::string& s, const std::string& v) { s += v; }
inline void append(std::string& s, char v) { s += v; }
template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, char>, int> = 0>
inline void append(std::string& s, T v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  s.append(buf, r.ptr);
}
template <typename T, std::enable_if_t<std::is_enum_v<T>, int> = 0>
inline void append(std::string& s, T v) {
  append(s, static_cast<std::underlying_type_t<T>>(v));
}
inline void append(std::string& s, double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);  // C locale: LC_NUMERIC is never changed by C++ code
  s += buf;
}

// cat("rank ", 3, " of ", 8) == "rank 3 of 8"
template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::string s;
  (append(s, parts), ...);
  return s;
}

}  // namespace moe_a2a
