#include "parallel/env_sync.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string_view>

namespace mla {
namespace {

std::map<std::string, std::string> by_name(const std::vector<std::string>& entries) {
  std::map<std::string, std::string> m;
  for (const auto& e : entries) {
    const size_t eq = e.find('=');
    m[e.substr(0, eq)] = eq == std::string::npos ? std::string() : e.substr(eq + 1);
  }
  return m;
}

}  // namespace

std::vector<std::string> mla_env_entries(char** env) {
  std::vector<std::string> out;
  for (char** e = env; e && *e; ++e)
    if (std::string_view(*e).starts_with("MLA_")) out.emplace_back(*e);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> env_mismatches(const std::vector<std::string>& root, const std::vector<std::string>& mine) {
  const auto r = by_name(root), m = by_name(mine);
  std::vector<std::string> out;
  auto shown = [](const std::map<std::string, std::string>& kv, const std::string& name) {
    auto it = kv.find(name);
    return it == kv.end() ? std::string("unset") : fmt::format("'{}'", it->second);
  };
  std::map<std::string, int> names;
  for (const auto& [k, v] : r) names[k] = 0;
  for (const auto& [k, v] : m) names[k] = 0;
  for (const auto& [name, unused] : names) {
    auto a = r.find(name), b = m.find(name);
    const bool same = a != r.end() && b != m.end() && a->second == b->second;
    if (!same)
      out.push_back(fmt::format("environment: {} is {} here but {} on rank 0; rank 0's value is used", name,
                                shown(m, name), shown(r, name)));
  }
  return out;
}

void adopt_env(const std::vector<std::string>& root) {
  for (const auto& e : mla_env_entries(environ)) unsetenv(e.substr(0, e.find('=')).c_str());
  for (const auto& [name, value] : by_name(root)) setenv(name.c_str(), value.c_str(), 1);
}

std::string join_env(const std::vector<std::string>& entries) {
  std::string out;
  for (const auto& e : entries) {
    out += e;
    out += '\0';
  }
  return out;
}

std::vector<std::string> split_env(const std::string& joined) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < joined.size()) {
    const size_t end = joined.find('\0', at);
    out.push_back(joined.substr(at, end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return out;
}

}  // namespace mla
