#pragma once
// The one error shape of the API: {"error": {"message", "type", "param", "code"}} with an HTTP
// status. Request handlers throw ApiError; the router turns it into the response.
#include <nlohmann/json.hpp>

#include <span>
#include <stdexcept>
#include <string>

namespace mla::server {

// message with its control characters escaped (\n, \r, \t, else \xNN), so that one that
// quotes a request's value (a role "a\nb") is still one line in the log and the error.
inline std::string one_line(const std::string& message) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(message.size());
  for (unsigned char c : message) {
    if (c >= 0x20 && c != 0x7f) {
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

class ApiError : public std::runtime_error {
 public:
  // param: the request field at fault ("" → null). code: a short machine-readable reason. The
  // message is made one line (one_line).
  ApiError(int status, const std::string& message, std::string param = "", std::string code = "")
      : std::runtime_error(one_line(message)), status_(status), param_(std::move(param)), code_(std::move(code)) {}

  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  nlohmann::ordered_json to_json() const;

 private:
  int status_;
  std::string param_, code_;
};

// obj[name] when it is a string, else "" (absent, null, another type, or obj not an object): for
// comparisons whose mismatch is already answered with a 400. json::value(name, "") would throw a
// type_error on a non-string, which the router answers with a 500.
inline std::string string_or_empty(const nlohmann::json& obj, const char* name) {
  if (!obj.is_object()) return {};
  auto it = obj.find(name);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// An error "type" name for an HTTP status. The OpenAI and Anthropic APIs name statuses
// differently (413, 503 and the fallbacks), so each protocol has its own table.
struct ErrorTypeName {
  int status;
  const char* type;
};

// The table's name for status; otherwise server_error for a 5xx and client_error for the rest.
inline const char* error_type_lookup(std::span<const ErrorTypeName> table, int status, const char* client_error,
                                     const char* server_error) {
  for (const ErrorTypeName& e : table)
    if (e.status == status) return e.type;
  return status >= 500 ? server_error : client_error;
}

// The OpenAI names: "invalid_request_error", "authentication_error", ... for a status.
const char* error_type_for_status(int status);

// 400 with a field name: the common case.
[[noreturn]] inline void bad_request(const std::string& message, std::string param = "",
                                     std::string code = "invalid_value") {
  throw ApiError(400, message, std::move(param), std::move(code));
}

}  // namespace mla::server
