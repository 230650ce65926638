// EngineCounters' operator-: the field lists next to the struct name every field exactly once
// (so a field added to the struct and to neither list fails here), each total is subtracted and
// each gauge kept from the later snapshot.
#include <gtest/gtest.h>

#include <cstddef>
#include <set>
#include <tuple>
#include <type_traits>
#include <vector>

#include "engine/engine.h"

namespace mla::testing {
namespace {

// Converts to the type of any field: an aggregate takes as many of these in braces as it has fields.
struct AnyField {
  template <class T>
  operator T() const;  // NOLINT(google-explicit-constructor): declared only, for the count below
};

// The probes initialize fewer fields than the struct has, on purpose.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
template <class T, class... Fields>
constexpr size_t n_aggregate_fields() {
  if constexpr (requires { T{Fields{}..., AnyField{}}; })
    return n_aggregate_fields<T, Fields..., AnyField>();
  else
    return sizeof...(Fields);
}
#pragma GCC diagnostic pop

template <class Tuple>
std::vector<ptrdiff_t> field_offsets(const Tuple& fields) {
  static const EngineCounters c{};
  std::vector<ptrdiff_t> out;
  std::apply(
      [&](auto... f) {
        (out.push_back(reinterpret_cast<const char*>(&(c.*f)) - reinterpret_cast<const char*>(&c)), ...);
      },
      fields);
  return out;
}

// Sets every listed field of c to `value` (a vector field to {value, 2 * value}).
template <class Tuple>
void fill(EngineCounters& c, const Tuple& fields, int value) {
  std::apply(
      [&](auto... f) {
        auto set = [&](auto field) {
          using T = std::remove_cvref_t<decltype(c.*field)>;
          if constexpr (std::is_same_v<T, std::vector<int64_t>>)
            c.*field = {value, 2 * value};
          else
            c.*field = static_cast<T>(value);
        };
        (set(f), ...);
      },
      fields);
}

TEST(EngineCounters, FieldListsNameEveryFieldOnce) {
  const std::vector<ptrdiff_t> gauges = field_offsets(kEngineCounterGauges);
  const std::vector<ptrdiff_t> totals = field_offsets(kEngineCounterTotals);
  std::set<ptrdiff_t> all(gauges.begin(), gauges.end());
  all.insert(totals.begin(), totals.end());
  EXPECT_EQ(all.size(), gauges.size() + totals.size()) << "a field is listed twice";
  EXPECT_EQ(all.size(), n_aggregate_fields<EngineCounters>())
      << "EngineCounters has a field in neither kEngineCounterGauges nor kEngineCounterTotals (engine.h)";
}

TEST(EngineCounters, DifferenceSubtractsTotalsAndKeepsLaterGauges) {
  EngineCounters later, earlier;
  fill(later, kEngineCounterGauges, 10);
  fill(later, kEngineCounterTotals, 10);
  fill(earlier, kEngineCounterGauges, 3);
  fill(earlier, kEngineCounterTotals, 3);
  const EngineCounters d = later - earlier;
  auto check_gauge = [&](auto field) { EXPECT_EQ(d.*field, later.*field); };
  std::apply([&](auto... f) { (check_gauge(f), ...); }, kEngineCounterGauges);
  auto check_total = [&](auto field) {
    using T = std::remove_cvref_t<decltype(d.*field)>;
    if constexpr (std::is_same_v<T, std::vector<int64_t>>)
      EXPECT_EQ(d.*field, (std::vector<int64_t>{7, 14}));
    else
      EXPECT_EQ(d.*field, static_cast<T>(7));
  };
  std::apply([&](auto... f) { (check_total(f), ...); }, kEngineCounterTotals);
}

TEST(EngineCounters, DifferenceFromAnEmptySnapshotKeepsEveryPosition) {
  // A run without a warm-up subtracts EngineCounters{}: no per-position entries to subtract.
  EngineCounters later;
  later.n_spec_accepted_per_pos = {4, 2, 1};
  later.n_steps = 9;
  const EngineCounters d = later - EngineCounters{};
  EXPECT_EQ(d.n_spec_accepted_per_pos, (std::vector<int64_t>{4, 2, 1}));
  EXPECT_EQ(d.n_steps, 9);
}

}  // namespace
}  // namespace mla::testing
