// Python's number parsing (float(str), int(str, base)) and round() on floats.
#include "jinja/pynum.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "jinja/pystr.h"
#include "jinja/value.h"  // jinja::Error

namespace mla::jinja::py {

// Python float(str): optional whitespace, sign, digits with single underscores, inf/nan.
std::optional<double> parse_float(const std::string& s) {
  std::string t = py::strip(s, std::nullopt, true, true);
  std::string clean;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '_') {
      bool ok = i > 0 && i + 1 < t.size() && std::isdigit(static_cast<unsigned char>(t[i - 1])) &&
                std::isdigit(static_cast<unsigned char>(t[i + 1]));
      if (!ok) return std::nullopt;
      continue;
    }
    clean.push_back(t[i]);
  }
  if (clean.empty()) return std::nullopt;
  std::string lower = py::lower(clean);
  std::string body = (lower[0] == '+' || lower[0] == '-') ? lower.substr(1) : lower;
  if (body == "inf" || body == "infinity" || body == "nan") {
    double x = body == "nan" ? NAN : INFINITY;
    return lower[0] == '-' ? -x : x;
  }
  for (char c : body)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == '+' || c == '-'))
      return std::nullopt;
  char* end = nullptr;
  double x = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return x;
}

// Python int(str, base) for bases 2..36 and 0.
std::optional<int64_t> parse_int(const std::string& s, int64_t base) {
  std::string t = py::strip(s, std::nullopt, true, true);
  bool neg = false;
  size_t i = 0;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) neg = t[i++] == '-';
  std::string lower = py::lower(t.substr(i));
  auto has_prefix = [&](char p) { return lower.size() > 2 && lower[0] == '0' && lower[1] == p; };
  if ((base == 16 || base == 0) && has_prefix('x')) {
    lower = lower.substr(2);
    base = 16;
  } else if ((base == 8 || base == 0) && has_prefix('o')) {
    lower = lower.substr(2);
    base = 8;
  } else if ((base == 2 || base == 0) && has_prefix('b')) {
    lower = lower.substr(2);
    base = 2;
  } else if (base == 0) {
    base = 10;
  }
  if (lower.empty() || lower.front() == '_' || lower.back() == '_' || lower.find("__") != std::string::npos)
    return std::nullopt;
  int64_t value = 0;
  for (char c : lower) {
    if (c == '_') continue;
    int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (c >= 'a' && c <= 'z') ? c - 'a' + 10 : 99;
    if (d >= base) return std::nullopt;
    if (__builtin_mul_overflow(value, base, &value) || __builtin_add_overflow(value, d, &value))
      throw Error("integer overflow: mla.cpp template integers are 64-bit");
  }
  return neg ? -value : value;
}

// Python's round(x, ndigits) on a float: correctly rounded, ties to even on the exact binary value.
double round(double x, int64_t ndigits) {
  if (!std::isfinite(x)) return x;
  if (ndigits >= 0) {
    if (ndigits > 320) return x;
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(ndigits), x);
    return std::strtod(buf, nullptr);
  }
  double scale = std::pow(10.0, static_cast<double>(-ndigits));
  return std::nearbyint(x / scale) * scale;
}

}  // namespace mla::jinja::py
