// Damaged checkpoints never crash the reader: every byte of a small checkpoint's index.h5 is
// flipped (one at a time, all 8 bits) and `inspect` runs in-process on the result; so is every
// byte of a shard's first 2 KiB (superblock, root group, first object headers) and every 53rd
// byte of the rest (every byte of the shard would take minutes: each flip re-reads the shard). Each flip must either still verify or fail with a dit::Error naming the damaged file; a
// segfault or abort inside HDF5 ends this test binary, which is the failure it guards against.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "layers/dit_stage.h"

namespace dit {
namespace {

namespace fs = std::filesystem;

// The smallest model the checkpoint code accepts: a handful of parameters, so the files are
// mostly HDF5 structure (the part a flipped byte can make HDF5 misparse).
DiTConfig micro_model() {
  DiTConfig c;
  c.input_size = 4;
  c.patch_size = 2;
  c.in_channels = 1;
  c.hidden_size = 8;
  c.depth = 1;
  c.num_heads = 1;
  c.num_classes = 2;
  c.frequency_embedding_size = 8;
  return c;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_bytes(const fs::path& p, const std::string& b) {
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(b.data(), std::streamsize(b.size()));
}

struct FlipCounts {
  int verified = 0, named = 0, unnamed = 0;
  std::string first_unnamed;
};

// Flips the bytes of `file` that `pick` selects, one at a time, running inspect on each.
template <class Pick>
FlipCounts flip_each(const std::string& dir, const fs::path& file, Pick pick) {
  const std::string good = read_bytes(file);
  FlipCounts c;
  for (std::size_t i = 0; i < good.size(); ++i) {
    if (!pick(i)) continue;
    std::string bad = good;
    bad[i] = static_cast<char>(~static_cast<unsigned char>(bad[i]));
    write_bytes(file, bad);
    try {
      inspect_checkpoint(dir);
      ++c.verified;
    } catch (const Error& e) {
      const std::string msg = e.what();
      if (msg.find(file.filename().string()) != std::string::npos) {
        ++c.named;
      } else {
        if (c.unnamed++ == 0) c.first_unnamed = "byte " + std::to_string(i) + ": " + msg;
      }
    }
  }
  write_bytes(file, good);
  return c;
}

class CheckpointDamage : public ::testing::Test {
 protected:
  void SetUp() override {
    // A memory file system when there is one: each flip rewrites a file and reads it back.
    const fs::path tmp = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::path(::testing::TempDir());
    root_ = tmp / ("dit_damage_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    const DiTConfig cfg = micro_model();
    ParallelContext ctx = make_single_context();
    ParamSet ps(be_, DiTStage::declare(cfg, StageLayout::whole(cfg)), 1, 0, 1);
    ps.initialize(3);
    StageState st;
    for (auto* v : {&st.model, &st.ema, &st.exp_avg, &st.exp_avg_sq}) v->assign(std::size_t(ps.padded_numel()), 0.5f);
    CheckpointMeta meta;
    meta.step = 7;
    meta.config_toml = "[train]\nsteps = 7\n";
    dir_ = save_checkpoint(root_.string(), meta, cfg, ps, ctx, st, 0);
    inspect_checkpoint(dir_);  // the undamaged checkpoint verifies
  }
  void TearDown() override { fs::remove_all(root_); }
  CpuBackend be_;
  fs::path root_;
  std::string dir_;
};

TEST_F(CheckpointDamage, EveryByteOfTheIndexIsVerifiedOrNamed) {
  const fs::path index = fs::path(dir_) / "index.h5";
  const auto t0 = std::chrono::steady_clock::now();
  const FlipCounts c = flip_each(dir_, index, [](std::size_t) { return true; });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("index.h5: %zu bytes flipped in %.1f s: %d still verify, %d named, %d unnamed\n",
              std::size_t(fs::file_size(index)), s, c.verified, c.named, c.unnamed);
  EXPECT_EQ(c.unnamed, 0) << c.first_unnamed;
  EXPECT_GT(c.named, 0);
}

TEST_F(CheckpointDamage, ShardBytesAreVerifiedOrNamed) {
  const fs::path shard = fs::path(dir_) / "shard_tp0_pp0_dp0.h5";
  const auto t0 = std::chrono::steady_clock::now();
  const FlipCounts c = flip_each(dir_, shard, [](std::size_t i) { return i < 2048 || i % 53 == 0; });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("shard: %zu bytes, %d flipped in %.1f s: %d still verify, %d named, %d unnamed\n",
              std::size_t(fs::file_size(shard)), c.verified + c.named + c.unnamed, s, c.verified, c.named,
              c.unnamed);
  EXPECT_EQ(c.unnamed, 0) << c.first_unnamed;
  EXPECT_GT(c.named, 0);
}

}  // namespace
}  // namespace dit
