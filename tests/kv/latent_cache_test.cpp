// The paged latent cache: sizes per dtype, capacity, row round trips and block copies.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kv/latent_cache.h"
#include "util/error.h"

namespace mla {
namespace {

const LatentShape kDeepSeekV3{61, 512, 64};

TEST(LatentCache, BytesPerTokenForDeepSeekV3Shapes) {
  // 576 latent values per token and layer, no separate K and V.
  EXPECT_EQ(bytes_per_token_per_layer(kDeepSeekV3, GgmlType::F16), 1152);
  EXPECT_EQ(bytes_per_token_per_layer(kDeepSeekV3, GgmlType::BF16), 1152);
  EXPECT_EQ(bytes_per_token_per_layer(kDeepSeekV3, GgmlType::F32), 2304);
  EXPECT_EQ(bytes_per_token_per_layer(kDeepSeekV3, GgmlType::Q8_0), 18 * 34);
}

TEST(LatentCache, CapacityFromTokensOrMemory) {
  EXPECT_EQ(blocks_for_capacity(kDeepSeekV3, GgmlType::F16, 16, 1000, 0), 63);  // rounded up
  const int64_t per_block = 1152LL * 61 * 16;
  EXPECT_EQ(blocks_for_capacity(kDeepSeekV3, GgmlType::F16, 16, 0, per_block * 10 + 5), 10);
  EXPECT_THROW(blocks_for_capacity(kDeepSeekV3, GgmlType::F16, 16, 0, per_block - 1), Error);
}

TEST(LatentCache, RejectsUnsupportedDtypes) {
  EXPECT_THROW(check_cache_dtype(GgmlType::Q4_K, kDeepSeekV3), Error);
  EXPECT_THROW(check_cache_dtype(GgmlType::Q8_0, LatentShape{1, 40, 8}), Error);
  EXPECT_THROW(parse_cache_dtype("fp8"), Error);
  EXPECT_EQ(parse_cache_dtype("Q8_0"), GgmlType::Q8_0);
  EXPECT_EQ(parse_cache_dtype("bf16"), GgmlType::BF16);
}

TEST(LatentCache, RowsRoundTripPerDtype) {
  const LatentShape shape{2, 56, 8};  // 64 values: two Q8_0 blocks
  std::vector<float> row(64);
  for (int i = 0; i < 64; ++i) row[i] = std::ldexp(static_cast<float>(i - 32), -3);  // k/8
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0}) {
    LatentCache cache(shape, t, 4, 3);
    cache.write_row(1, 9, row.data());
    std::vector<float> back(64);
    int32_t slot = 9;
    cache.read_rows(1, {&slot, 1}, back.data());
    for (int i = 0; i < 64; ++i) {
      if (t == GgmlType::Q8_0) {
        // Per 32 values: d = max|x| / 127 stored as F16; error <= d / 2 + 127 * |d - fp16(d)|.
        EXPECT_NEAR(back[i], row[i], 4.0 / 127 * 0.6) << ggml_type_name(t) << " " << i;
      } else {
        EXPECT_EQ(back[i], row[i]) << ggml_type_name(t) << " " << i;  // k/8 is exact in all three
      }
    }
  }
}

TEST(LatentCache, F16RowsRoundToNearest) {
  LatentCache cache({1, 4, 0}, GgmlType::F16, 1, 1);
  // 1 + 2^-11 is halfway between F16 neighbours 1 and 1 + 2^-10: ties to even gives 1.
  // 1 + 3 * 2^-12 rounds up to 1 + 2^-10.
  const float row[4] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-12f, 65504.0f, -0x1p-24f};
  cache.write_row(0, 0, row);
  float back[4];
  int32_t slot = 0;
  cache.read_rows(0, {&slot, 1}, back);
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], 1.0f + 0x1p-10f);
  EXPECT_EQ(back[2], 65504.0f);
  EXPECT_EQ(back[3], -0x1p-24f);
}

TEST(LatentCache, CopyBlockCopiesEveryLayer) {
  LatentCache cache({3, 4, 4}, GgmlType::F32, 2, 4);
  std::vector<float> row(8);
  for (int l = 0; l < 3; ++l)
    for (int s = 2; s < 4; ++s) {  // block 1
      for (int i = 0; i < 8; ++i) row[i] = static_cast<float>(100 * l + 10 * s + i);
      cache.write_row(l, s, row.data());
    }
  cache.copy_block(1, 3);
  std::vector<float> back(16);
  std::vector<int32_t> slots = {6, 7};
  for (int l = 0; l < 3; ++l) {
    cache.read_rows(l, slots, back.data());
    for (int s = 0; s < 2; ++s)
      for (int i = 0; i < 8; ++i) EXPECT_EQ(back[s * 8 + i], static_cast<float>(100 * l + 10 * (s + 2) + i));
  }
  EXPECT_EQ(cache.total_bytes(), 3 * 8 * 4 * 8);
}

TEST(LatentCache, DescribeStatesCapacityAndBytesPerToken) {
  LatentCache cache({2, 512, 64}, GgmlType::F16, 16, 4);
  EXPECT_EQ(cache.describe(),
            "F16, block 16, 4 blocks = 64 tokens, 1152 B/token/layer x 2 layers = 2304 B/token, "
            "0.14 MiB");
}

}  // namespace
}  // namespace mla
