// The API's default error shape, {"error": {...}} (see api_error.h).
#include "server/api_error.h"

#include "server/json.h"

namespace mla::server {

const char* error_type_for_status(int status) {
  static constexpr ErrorTypeName kTypes[] = {
      {400, "invalid_request_error"},   {401, "authentication_error"},     {403, "permission_error"},
      {404, "not_found_error"},         {405, "method_not_allowed_error"}, {408, "timeout_error"},
      {413, "request_too_large_error"}, {431, "request_too_large_error"},  {503, "service_unavailable_error"},
  };
  return error_type_lookup(kTypes, status, "invalid_request_error", "internal_error");
}

json ApiError::to_json() const {
  json err = {{"message", what()},
              {"type", error_type_for_status(status_)},
              {"param", param_.empty() ? json(nullptr) : json(param_)},
              {"code", code_.empty() ? json(status_) : json(code_)}};
  return json{{"error", std::move(err)}};
}

}  // namespace mla::server
