#pragma once
// Python's number parsing and rounding, as the jinja filters int, float and round need them.
#include <cstdint>
#include <optional>
#include <string>

namespace mla::jinja::py {

// float(str): optional whitespace, sign, digits with single underscores, inf/nan; nullopt when
// Python would raise ValueError.
std::optional<double> parse_float(const std::string& s);
// int(str, base) for bases 2..36 and 0 (from the prefix); nullopt when Python would raise
// ValueError; throws jinja::Error past 64 bits.
std::optional<int64_t> parse_int(const std::string& s, int64_t base);
// round(x, ndigits) on a float: correctly rounded, ties to even on the exact binary value.
double round(double x, int64_t ndigits);

}  // namespace mla::jinja::py
