#include "server/sse.h"

namespace mla::server {

std::string dump_json(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string sse_event(const nlohmann::ordered_json& j) {
  std::string out = "data: ";
  out += dump_json(j);
  out += "\n\n";
  return out;
}

}  // namespace mla::server
