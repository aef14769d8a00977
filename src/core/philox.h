// Counter-based random numbers (Philox 4x32-10, Salmon et al. 2011), keyed by
// (seed, purpose, step, index). Every random number in dit_mp comes from here, so the numbers a
// sample sees do not depend on the layout, the rank that draws them, or whether the run resumed.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

// The block function and the stream layout are also compiled for the device (CUDA kernels draw
// the same numbers: Backend::philox_normal).
#if defined(__CUDACC__)
#define DIT_PHILOX_HD __host__ __device__
#else
#define DIT_PHILOX_HD
#endif

namespace dit {

// What a stream is for; part of the counter so streams never overlap.
enum class RngPurpose : std::uint32_t {
  Init = 1,        // parameter initialization; index = tensor id
  Timestep = 2,    // diffusion timestep of a training sample; index = global sample index
  Noise = 3,       // diffusion noise of a training sample
  LabelDrop = 4,   // classifier-free-guidance label dropout
  Sampler = 5,     // sampling-time noise; index = sample index, step = sampler step
  DataOrder = 6,   // per-epoch dataset permutation; step = epoch
  Gate = 7,        // learned pruning's Gumbel noise; index = stream position (engine/layer_gates.h)
  LatentSample = 8,  // a VAE latent drawn from its Gaussian; index = source image, step = flip
  Test = 100,
};

// The ten Philox 4x32 rounds: out = block(ctr, key).
DIT_PHILOX_HD inline void philox_block(const std::uint32_t ctr[4], const std::uint32_t key[2],
                                       std::uint32_t out[4]) {
  constexpr std::uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr std::uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  std::uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kM0) * c0;
    const std::uint64_t p1 = static_cast<std::uint64_t>(kM1) * c2;
    const std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

// The initial counter of the stream (purpose, step, index); word 0 counts blocks.
DIT_PHILOX_HD inline void philox_counter(std::uint32_t purpose, std::uint64_t step,
                                         std::uint64_t index, std::uint32_t ctr[4]) {
  ctr[0] = 0;
  ctr[1] = static_cast<std::uint32_t>(index);
  ctr[2] = static_cast<std::uint32_t>(step);
  ctr[3] = (purpose << 24) ^ static_cast<std::uint32_t>((index >> 32) & 0xffffffu) ^
           static_cast<std::uint32_t>((step >> 32) & 0xffu) << 16;
}

// Normal number j of the stream (seed, purpose, step, index), as Philox::normal() draws them in
// sequence: pair k = j / 2 takes 32-bit words 2k and 2k + 1 (block k / 2); even j is the cosine,
// odd j the sine of the Box-Muller pair (computed in double).
DIT_PHILOX_HD inline float philox_normal_at(std::uint64_t seed, std::uint32_t purpose,
                                            std::uint64_t step, std::uint64_t index,
                                            std::uint64_t j) {
  std::uint32_t ctr[4], out[4];
  const std::uint32_t key[2] = {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
  philox_counter(purpose, step, index, ctr);
  const std::uint64_t pair = j / 2;
  ctr[0] = static_cast<std::uint32_t>(pair / 2);
  philox_block(ctr, key, out);
  const int w = static_cast<int>(pair % 2) * 2;
  const double u1 = (static_cast<double>(out[w] >> 8) + 1.0) * 0x1p-24;  // (0, 1]
  const double u2 = static_cast<double>(out[w + 1] >> 8) * 0x1p-24;
  const double r = sqrt(-2.0 * log(u1));
  const double th = 6.283185307179586476925286766559 * u2;
  return static_cast<float>(j % 2 == 0 ? r * cos(th) : r * sin(th));
}

class Philox {
 public:
  Philox(std::uint64_t seed, RngPurpose purpose, std::uint64_t step, std::uint64_t index)
      : key_{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)} {
    philox_counter(static_cast<std::uint32_t>(purpose), step, index, ctr_.data());
  }

  std::uint32_t next_u32() {
    if (pos_ == 4) refill();
    return out_[pos_++];
  }
  // Uniform in [0, 1) with 24 random bits.
  float uniform() { return static_cast<float>(next_u32() >> 8) * 0x1p-24f; }
  // Uniform in [0, 1) with 53 random bits.
  double uniform_f64() {
    std::uint64_t a = next_u32() >> 5, b = next_u32() >> 6;
    return (static_cast<double>(a) * 67108864.0 + static_cast<double>(b)) * 0x1p-53;
  }
  // Standard normal by Box-Muller (computed in double, so it is the same on every compiler).
  float normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = (static_cast<double>(next_u32() >> 8) + 1.0) * 0x1p-24;  // (0, 1]
    double u2 = static_cast<double>(next_u32() >> 8) * 0x1p-24;
    double r = std::sqrt(-2.0 * std::log(u1));
    double th = 6.283185307179586476925286766559 * u2;
    spare_ = static_cast<float>(r * std::sin(th));
    has_spare_ = true;
    return static_cast<float>(r * std::cos(th));
  }
  // Integer in [0, n) (n small compared with 2^32; the bias is below 2^-32 * n).
  std::uint32_t below(std::uint32_t n) {
    return static_cast<std::uint32_t>((static_cast<std::uint64_t>(next_u32()) * n) >> 32);
  }

  static std::array<std::uint32_t, 4> block(std::array<std::uint32_t, 4> ctr,
                                            std::array<std::uint32_t, 2> key);

 private:
  void refill() {
    out_ = block(ctr_, key_);
    ++ctr_[0];
    pos_ = 0;
  }
  std::array<std::uint32_t, 2> key_;
  std::array<std::uint32_t, 4> ctr_;
  std::array<std::uint32_t, 4> out_{};
  int pos_ = 4;
  bool has_spare_ = false;
  float spare_ = 0.f;
};

inline std::array<std::uint32_t, 4> Philox::block(std::array<std::uint32_t, 4> c,
                                                  std::array<std::uint32_t, 2> k) {
  std::array<std::uint32_t, 4> out;
  philox_block(c.data(), k.data(), out.data());
  return out;
}

}  // namespace dit
