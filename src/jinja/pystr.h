#pragma once
// Python str semantics on UTF-8 text, as the Jinja interpreter needs them: code-point indexing,
// str.strip/split/replace/find, case mapping, whitespace and printability classes, and the exact
// text of repr(str) and repr(float). Strings are std::string holding UTF-8; positions and lengths
// in the Python-facing functions are in code points, as in Python.
//
// Case mapping covers ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (plus 'ß' -> "SS");
// other scripts are left unchanged. Printability (repr) knows the Unicode space, format, control
// and private-use ranges, not every unassigned code point.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mla::jinja::py {

// UTF-8 <-> code points. Decoding never fails: a byte that does not start a valid sequence is
// taken as the code point of that byte (inputs are validated where they enter the engine).
std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
void append_utf8(std::string& out, char32_t c);
size_t length(std::string_view s);
// True if s is well-formed UTF-8; on failure *bad_offset gets the byte offset of the first error.
bool valid_utf8(std::string_view s, size_t* bad_offset = nullptr);

bool is_space(char32_t c);      // str.isspace() / the \s class of Python's re
bool is_printable(char32_t c);  // str.isprintable()
bool is_alpha(char32_t c);
bool is_digit(char32_t c);  // decimal digits only
bool is_word(char32_t c);   // \w of Python's re (approximation outside the covered scripts)
bool is_cased_upper(char32_t c);
bool is_cased_lower(char32_t c);
char32_t to_upper(char32_t c);
char32_t to_lower(char32_t c);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string capitalize(std::string_view s);  // str.capitalize
std::string title(std::string_view s);       // str.title
std::string swapcase(std::string_view s);

// str.strip / lstrip / rstrip; chars == nullopt strips whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split / str.rsplit; sep == nullopt splits on whitespace runs. maxsplit < 0: no limit.
// An empty sep is a ValueError in Python: the caller checks.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s, bool keepends);
// str.replace; count < 0: all.
std::string replace(std::string_view s, std::string_view old_s, std::string_view new_s, int64_t count);

// Python slice-index normalisation: clamps start/end (code points, may be negative) to [0, n].
void adjust_range(int64_t n, std::optional<int64_t>& start, std::optional<int64_t>& end);
// str.find / rfind / count over the code-point range [start, end); -1 when absent.
int64_t find(std::string_view s, std::string_view sub, std::optional<int64_t> start, std::optional<int64_t> end,
             bool reverse);
int64_t count(std::string_view s, std::string_view sub, std::optional<int64_t> start, std::optional<int64_t> end);
bool startswith(std::string_view s, std::string_view prefix, std::optional<int64_t> start, std::optional<int64_t> end,
                bool at_end);

// A non-empty run of ASCII digits as an integer, saturating at INT64_MAX (Python ints are
// unbounded; every caller uses the value as an index, where any huge value is out of range).
int64_t digits_value(std::string_view digits);

// repr(str): quotes and escapes exactly as CPython does.
std::string repr(std::string_view s);
// repr(float): the shortest round-trip form, e.g. "1.0", "0.30000000000000004", "1e+16", "inf".
std::string float_repr(double x);

}  // namespace mla::jinja::py
