// Rows dealt out over the world and gathered back (parallel/rows.h), at the job's size (8 ranks
// in mpi.layouts): tables with fewer, as many and more rows than ranks, and none; each row's
// values name their row, so a share or an order that is off shows. Then the VAE's decode split
// over the ranks (run/vae_decode.h) against one rank decoding everything: the same bits.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/vae_weights.h"
#include "parallel/rows.h"
#include "parallel/world.h"
#include "run/vae_decode.h"

namespace dit {
namespace {

float value_of(std::int64_t row, std::int64_t col) { return static_cast<float>(row * 1000 + col); }

TEST(Rows, DealtOutAndGatheredInRowOrder) {
  const std::unique_ptr<Comm> world = watched_world();
  const int rank = world_rank(), ranks = world_size();
  for (const std::int64_t n : {std::int64_t{0}, std::int64_t{3}, std::int64_t{ranks}, std::int64_t{2 * ranks + 3}}) {
    const std::int64_t width = 5;
    Rows all{n, width, {}};
    if (rank == 0)
      for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t c = 0; c < width; ++c) all.values.push_back(value_of(r, c));
    else
      all = Rows{-1, -1, {1.0f}};  // not read on the other ranks
    const Rows mine = scatter_rows(*world, all);
    const RowShare s = row_share(n, rank, ranks);
    ASSERT_EQ(mine.width, width) << "n " << n;
    ASSERT_EQ(mine.n, s.count) << "n " << n;
    for (std::int64_t r = 0; r < mine.n; ++r)
      for (std::int64_t c = 0; c < width; ++c)
        ASSERT_EQ(mine.values[r * width + c], value_of(s.first + r, c)) << "n " << n << " local row " << r;
    const Rows back = gather_rows(*world, mine);
    if (rank == 0) {
      EXPECT_EQ(back.n, n);
      EXPECT_EQ(back.values, all.values) << "n " << n;
    } else {
      EXPECT_EQ(back.n, 0);
      EXPECT_TRUE(back.values.empty());
    }
  }
  // The shares tile the table: sizes differ by at most one.
  std::int64_t covered = 0;
  for (int r = 0; r < ranks; ++r) {
    const RowShare s = row_share(13, r, ranks);
    EXPECT_EQ(s.first, covered);
    EXPECT_LE(s.count, 13 / ranks + 1);
    covered += s.count;
  }
  EXPECT_EQ(covered, 13);
  const std::vector<std::int64_t> dims =
      broadcast_values(*world, rank == 0 ? std::vector<std::int64_t>{4, -7, 1ll << 40} : std::vector<std::int64_t>{});
  EXPECT_EQ(dims, (std::vector<std::int64_t>{4, -7, 1ll << 40}));
}

TEST(Rows, DecodingOverTheRanksGivesOneRanksPictures) {
  const VaeFile vae = open_vae(std::string(DIT_TEST_DATA) + "/vae_tiny.safetensors");
  const std::int64_t n = world_size() + 3, h = 4, w = 2, per = vae.config.latent_channels * h * w;
  std::vector<float> latents(static_cast<std::size_t>(n * per));
  for (std::size_t i = 0; i < latents.size(); ++i) latents[i] = 0.1f * static_cast<float>((i * 7919) % 23) - 1.1f;
  const std::vector<float> split =
      decode_on_ranks(*watched_world(), vae, "cpu", world_rank() == 0 ? latents : std::vector<float>{}, n, h, w);
  if (world_rank() != 0) {
    EXPECT_TRUE(split.empty());
    return;
  }
  const std::vector<float> whole = decode_latents(vae, "cpu", latents, n, h, w, 8);
  ASSERT_EQ(split.size(), whole.size());
  EXPECT_EQ(split, whole) << "pictures decoded over " << world_size() << " ranks differ from one rank's";
}

}  // namespace
}  // namespace dit
