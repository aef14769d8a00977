// Core pieces: the keyed Philox generator, arenas, shapes and dtype conversion.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "backend/cpu/cpu_backend.h"
#include "core/arena.h"
#include "core/philox.h"

namespace dit {

TEST(Philox, KnownAnswerVector) {
  // Random123's published known-answer test for philox4x32-10 with all-zero counter and key.
  auto out = Philox::block({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(out[0], 0x6627e8d5u);
  EXPECT_EQ(out[1], 0xe169c58du);
  EXPECT_EQ(out[2], 0xbc57ac4cu);
  EXPECT_EQ(out[3], 0x9b00dbd8u);
  auto ff = Philox::block({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                          {0xffffffffu, 0xffffffffu});
  EXPECT_EQ(ff[0], 0x408f276du);
  EXPECT_EQ(ff[1], 0x41c83b0eu);
  EXPECT_EQ(ff[2], 0xa20bc7c6u);
  EXPECT_EQ(ff[3], 0x6d5451fdu);
}

TEST(Philox, StreamsDependOnEveryKeyPart) {
  std::set<std::uint32_t> firsts;
  for (std::uint64_t seed : {1ull, 2ull})
    for (auto purpose : {RngPurpose::Noise, RngPurpose::Timestep})
      for (std::uint64_t step : {0ull, 7ull})
        for (std::uint64_t index : {0ull, 5ull, (1ull << 33)})
          firsts.insert(Philox(seed, purpose, step, index).next_u32());
  EXPECT_EQ(firsts.size(), 24u);
  Philox a(3, RngPurpose::Noise, 4, 5), b(3, RngPurpose::Noise, 4, 5);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next_u32(), b.next_u32());
}

TEST(Philox, NormalMoments) {
  Philox rng(42, RngPurpose::Test, 0, 0);
  const int n = 200000;
  double s = 0, s2 = 0;
  for (int i = 0; i < n; ++i) {
    const double v = rng.normal();
    s += v;
    s2 += v * v;
  }
  EXPECT_NEAR(s / n, 0.0, 0.01);
  EXPECT_NEAR(s2 / n, 1.0, 0.01);
  Philox u(42, RngPurpose::Test, 1, 0);
  double su = 0;
  for (int i = 0; i < n; ++i) {
    const float v = u.uniform();
    ASSERT_GE(v, 0.f);
    ASSERT_LT(v, 1.f);
    su += v;
  }
  EXPECT_NEAR(su / n, 0.5, 0.005);
}

TEST(Arena, AlignsReusesAndGrows) {
  CpuBackend be;
  Arena arena(be, 1024);
  void* a = arena.allocate(10);
  void* b = arena.allocate(2000);  // larger than a chunk: gets its own
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 256, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b) % 256, 0u);
  EXPECT_NE(a, b);
  const auto m = arena.mark();
  void* c = arena.allocate(16);
  arena.rewind(m);
  EXPECT_EQ(arena.allocate(16), c);
  const std::size_t reserved = arena.reserved_bytes();
  arena.reset();
  EXPECT_EQ(arena.allocate(10), a);
  EXPECT_EQ(arena.reserved_bytes(), reserved);
}

TEST(DType, Bf16RoundTripRoundsToNearestEven) {
  EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(1.0f)), 1.0f);
  EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(-3.5f)), -3.5f);
  // 1 + 2^-8 lies exactly between two bf16 values; ties go to the even one (1.0).
  EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(1.0f + 0x1p-8f)), 1.0f);
  EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(1.0f + 0x1p-8f + 0x1p-10f)), 1.0f + 0x1p-7f);
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(NAN))));
  EXPECT_THROW(parse_dtype("fp8"), Error);
}

}  // namespace dit
