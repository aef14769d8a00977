// Sharded checkpoints (8 ranks): a state whose every value is a known function of (kind, tensor,
// GLOBAL element index) is saved at tp 2 pp 2 dp 2 and loaded at other layouts, each local value
// checked bit for bit; plus pruning and `latest`, incomplete and corrupt checkpoints, model
// config mismatches, and h5py reading index.h5 as plain tensors. Each case runs on the first N
// ranks of the job through sub-communicators, as the layout tests do.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>

#include "engine/dit_pipeline.h"
#include "backend/cpu/cpu_backend.h"
#include "io/checkpoint.h"
#include "io/checkpoint_manifest.h"
#include "parallel/mpi_comm.h"
#include "tiny_model.h"

namespace dit {

namespace {

DiTConfig model() { return tiny_dit(2, 4, 4, 5); }

namespace fs = std::filesystem;

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// A context for `l` on the first l.world() ranks; empty elsewhere. Every rank must call it.
std::optional<ParallelContext> join(const Layout& l) {
  auto world = MpiComm::world();
  const int r = world_rank();
  auto sub = MpiComm::split(*world, r < l.world() ? 0 : 1, r);
  if (r >= l.world()) return std::nullopt;
  return make_mpi_context(l, std::move(sub));
}

// The parameters of this rank's stage (padded for ZeRO like the trainer's).
std::unique_ptr<ParamSet> stage_params(Backend& be, const DiTConfig& cfg,
                                       const ParallelContext& ctx) {
  const auto stages = partition_stages(cfg, ctx.layout.pp);
  return std::make_unique<ParamSet>(be, DiTStage::declare(cfg, stages[ctx.coord.pp]), ctx.layout.tp,
                                    ctx.coord.tp, ctx.layout.dp);
}

// Value of element `idx` of the global tensor `name` of state kind `kind`: an integer below 2^23
// over 1024, so exact in float32 and easy to recompute in Python (see kPython).
float expected(int kind, const std::string& name, std::int64_t idx) {
  const std::uint64_t m = (name_hash(name) * 2654435761ull + std::uint64_t(idx) * 40503ull +
                           std::uint64_t(kind) * 7919ull + 1) &
                          ((1u << 23) - 1);
  return (float(m) - float(1 << 22)) / 1024.f;
}

StageState make_state(const ParamSet& ps) {
  StageState st;
  std::vector<float>* kinds[] = {&st.model, &st.ema, &st.exp_avg, &st.exp_avg_sq};
  for (int k = 0; k < 4; ++k) {
    kinds[k]->assign(std::size_t(ps.padded_numel()), 0.f);
    for (std::size_t i = 0; i < ps.size(); ++i) {
      const ParamSpec& s = ps.specs()[i];
      std::vector<float> g(std::size_t(s.global.numel()));
      for (std::size_t j = 0; j < g.size(); ++j) g[j] = expected(k, s.name, std::int64_t(j));
      s.slice(g.data(), kinds[k]->data() + ps.offset(int(i)), ps.tp(), ps.tp_rank());
    }
  }
  return st;
}

// Counts the values that differ in bits (padding included).
std::int64_t mismatches(const StageState& a, const StageState& b) {
  const std::vector<float>* x[] = {&a.model, &a.ema, &a.exp_avg, &a.exp_avg_sq};
  const std::vector<float>* y[] = {&b.model, &b.ema, &b.exp_avg, &b.exp_avg_sq};
  std::int64_t bad = 0;
  for (int k = 0; k < 4; ++k) {
    if (x[k]->size() != y[k]->size()) return -1;
    bad += std::int64_t(x[k]->size()) -
           std::inner_product(x[k]->begin(), x[k]->end(), y[k]->begin(), std::int64_t(0),
                              std::plus<>(),
                              [](float p, float q) { return std::memcmp(&p, &q, 4) == 0 ? 1 : 0; });
  }
  return bad;
}

CheckpointMeta meta_for(std::int64_t step) {
  CheckpointMeta m;
  m.step = step;
  m.config_toml = "[train]\nsteps = 100\n";
  m.seed = 0xfedcba9876543210ull;  // above 2^63: stored as uint64
  m.loss_scale = 65536.0;
  return m;
}

// A fresh folder shared by all ranks (rank 0's pid names it), removed at the end of the test.
class TempRoot {
 public:
  TempRoot() {
    int pid = world_rank() == 0 ? int(getpid()) : 0;
    MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
    static int n = 0;
    path_ = (fs::temp_directory_path() /
             ("dit_ckpt_test_" + std::to_string(pid) + "_" + std::to_string(n++)))
                .string();
  }
  ~TempRoot() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) fs::remove_all(path_);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Saves the reference state at `l` (all members); returns the step folder ("" on non-members).
std::string save_at(const Layout& l, const std::string& root, std::int64_t step, int keep,
                    double* seconds = nullptr, const DiTConfig& cfg = model()) {
  auto ctx = join(l);
  if (!ctx) return "";
  CpuBackend be;
  auto ps = stage_params(be, cfg, *ctx);
  const StageState st = make_state(*ps);
  ctx->world->barrier();
  const auto t0 = std::chrono::steady_clock::now();
  std::string dir = save_checkpoint(root, meta_for(step), cfg, *ps, *ctx, st, keep);
  if (seconds)
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return dir;
}

// Loads at `l` with `cfg` and the reference checks; returns the error message ("" when it loaded).
struct LoadResult {
  bool member = false;
  std::string error;
  CheckpointMeta meta;
  std::int64_t bad = 0;
  double seconds = 0;
};
LoadResult load_at(const Layout& l, const std::string& path, const DiTConfig& cfg = model(),
                   const std::vector<ParamSpec>& extra = {}) {
  LoadResult r;
  auto ctx = join(l);
  if (!ctx) return r;
  r.member = true;
  CpuBackend be;
  const auto stages = partition_stages(cfg, l.pp);
  auto specs = DiTStage::declare(cfg, stages[ctx->coord.pp]);
  specs.insert(specs.end(), extra.begin(), extra.end());
  ParamSet ps(be, specs, l.tp, ctx->coord.tp, l.dp);
  StageState st;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    r.meta = load_checkpoint(path, cfg, ps, *ctx, st);
  } catch (const Error& e) {
    r.error = e.what();
    return r;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.bad = mismatches(st, make_state(ps));
  return r;
}

std::uintmax_t folder_bytes(const std::string& dir) {
  std::uintmax_t b = 0;
  for (const auto& e : fs::directory_iterator(dir)) b += e.is_regular_file() ? e.file_size() : 0;
  return b;
}

// The shard file (name) of the saved step folder that holds `dataset`.
std::string shard_holding(const std::string& dir, const std::string& dataset) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("shard_tp0_", 0) != 0) continue;
    hid_t f = H5Fopen(e.path().c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const bool has =
        H5Lexists(f, "model", H5P_DEFAULT) > 0 && H5Lexists(f, dataset.c_str(), H5P_DEFAULT) > 0;
    H5Fclose(f);
    if (has) return n;
  }
  return "";
}

// Reads a dataset of index.h5 through HDF5's own VDS resolution: "" or HDF5's error, and the
// count of NaN read (how HDF5 1.10.8 treats corrupt and missing sources; printed, not relied on).
std::string read_through_vds(const std::string& index, const std::string& dataset,
                             std::size_t* nans) {
  hid_t f = H5Fopen(index.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  hid_t space = H5Dget_space(d);
  std::vector<float> v(std::size_t(H5Sget_simple_extent_npoints(space)));
  const herr_t rc = H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  *nans = std::size_t(std::count_if(v.begin(), v.end(), [](float x) { return std::isnan(x); }));
  H5Sclose(space);
  H5Dclose(d);
  H5Fclose(f);
  return rc < 0 ? "read fails" : "";
}

// Flips one bit in the middle of the first chunk of `dataset` in `file`.
bool flip_byte(const std::string& file, const std::string& dataset) {
  haddr_t addr = 0;
  hsize_t size = 0, offset[kMaxDims];
  unsigned mask = 0;
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  hid_t space = H5Dget_space(d);
  const bool ok =
      d >= 0 && H5Dget_chunk_info(d, space, 0, offset, &mask, &addr, &size) >= 0 && size > 8;
  H5Sclose(space);
  H5Dclose(d);
  H5Fclose(f);
  if (!ok) return false;
  std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
  char c = 0;
  io.seekg(std::streamoff(addr + size / 2));
  io.read(&c, 1);
  c ^= 0x10;
  io.seekp(std::streamoff(addr + size / 2));
  io.write(&c, 1);
  return io.good();
}

}  // namespace

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (world_size() < 8)
      GTEST_SKIP() << "the checkpoint tests need 8 ranks, the job has " << world_size();
  }
};

TEST_F(CheckpointTest, ReshardsToAnyLayoutBitExact) {
  TempRoot root;
  double save_s = 0;
  const std::string dir = save_at({2, 2, 2}, root.path(), 7, 0, &save_s);
  for (const Layout& l :
       {Layout{2, 2, 2}, Layout{1, 1, 1}, Layout{4, 1, 2}, Layout{1, 4, 1}, Layout{2, 1, 4}}) {
    const LoadResult r = load_at(l, root.path());
    if (!r.member) continue;
    EXPECT_EQ(r.error, "") << l.str();
    EXPECT_EQ(r.bad, 0) << l.str() << ": values differ from the saved global tensors";
    EXPECT_EQ(r.meta.step, 7);
    EXPECT_EQ(r.meta.layout.tp, 2);
    EXPECT_EQ(r.meta.layout.pp, 2);
    EXPECT_EQ(r.meta.layout.dp, 2);
    EXPECT_EQ(r.meta.seed, 0xfedcba9876543210ull);
    EXPECT_EQ(r.meta.loss_scale, 65536.0);
    EXPECT_EQ(r.meta.config_toml, "[train]\nsteps = 100\n");
    EXPECT_EQ(r.meta.dir, dir);
    if (world_rank() == 0)
      std::printf("[ checkpoint ] load at %s: %.1f ms on rank 0\n", l.str().c_str(),
                  1e3 * r.seconds);
  }
  if (world_rank() == 0) {
    std::size_t files = 0;
    for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
    std::printf(
        "[ checkpoint ] save at tp 2 pp 2 dp 2: %.1f ms, %zu files, %ju bytes (%lld parameters)\n",
        1e3 * save_s, files, folder_bytes(dir), model().num_params());
    const std::string report = inspect_checkpoint(root.path());
    EXPECT_NE(report.find("step 7"), std::string::npos) << report;
    EXPECT_NE(report.find("tp 2 pp 2 dp 2"), std::string::npos) << report;
    EXPECT_NE(report.find("blocks.0.attn.qkv.weight"), std::string::npos) << report;
    EXPECT_NE(report.find("(96, 32)"), std::string::npos) << report;
    EXPECT_NE(report.find("checksums OK"), std::string::npos) << report;
    std::printf("%s", report.c_str());
  }
}

// LightningDiT's block variants: w12 (two column groups), w3, the norm and q/k norm weights
// reshard bit-exactly, the variants travel in the checkpoint's config, and a DiT model refuses it.
TEST_F(CheckpointTest, LightningVariantsReshardBitExact) {
  DiTConfig cfg = model();
  cfg.mlp_ratio = 3.0;  // SwiGLU hidden int(2/3 * 96) = 64: splits over tp 4
  cfg.mlp = MlpKind::Swiglu, cfg.norm = NormKind::RmsNorm, cfg.pos_embed = PosEmbed::Rope;
  cfg.qk_norm = true;
  TempRoot root;
  save_at({2, 2, 2}, root.path(), 3, 0, nullptr, cfg);
  for (const Layout& l : {Layout{1, 1, 1}, Layout{4, 1, 2}, Layout{1, 4, 1}, Layout{4, 2, 1}}) {
    const LoadResult r = load_at(l, root.path(), cfg);
    if (!r.member) continue;
    EXPECT_EQ(r.error, "") << l.str();
    EXPECT_EQ(r.bad, 0) << l.str() << ": values differ from the saved global tensors";
  }
  if (world_rank() == 0) {
    const DiTConfig c = read_checkpoint_model(root.path());
    EXPECT_EQ(c.mlp, MlpKind::Swiglu);
    EXPECT_EQ(c.norm, NormKind::RmsNorm);
    EXPECT_EQ(c.pos_embed, PosEmbed::Rope);
    EXPECT_TRUE(c.qk_norm);
    const std::string report = inspect_checkpoint(root.path());
    for (const char* name : {"blocks.0.mlp.w12.weight", "blocks.3.mlp.w3.weight", "blocks.1.norm1.weight",
                             "blocks.2.attn.q_norm.weight", "final_layer.norm_final.weight"})
      EXPECT_NE(report.find(name), std::string::npos) << name << "\n" << report;
  }
  DiTConfig gelu = cfg;
  gelu.mlp = MlpKind::Gelu;
  const LoadResult r = load_at({1, 1, 1}, root.path(), gelu);
  if (r.member) {
    EXPECT_NE(r.error.find("mlp swiglu vs gelu"), std::string::npos) << r.error;
  }
}

TEST_F(CheckpointTest, KeepPrunesOldOnesAndLatestFollows) {
  TempRoot root;
  for (int step = 1; step <= 3; ++step) save_at({2, 2, 2}, root.path(), step, 2);
  auto exists = [&](int step) {
    return fs::exists(root.path() + "/step_0000000" + std::to_string(step));
  };
  EXPECT_FALSE(exists(1));
  EXPECT_TRUE(exists(2));
  EXPECT_TRUE(exists(3));
  EXPECT_EQ(latest_checkpoint(root.path()), root.path() + "/step_00000003");
  save_at({2, 2, 2}, root.path(), 4, 1);
  EXPECT_FALSE(exists(2));
  EXPECT_FALSE(exists(3));
  EXPECT_TRUE(exists(4));
  // Saving the same step again replaces it; keep <= 0 keeps everything.
  save_at({2, 2, 2}, root.path(), 4, 0);
  save_at({2, 2, 2}, root.path(), 5, 0);
  EXPECT_TRUE(exists(4));
  EXPECT_TRUE(exists(5));
  std::ifstream latest(root.path() + "/latest");
  std::string name;
  latest >> name;
  EXPECT_EQ(name, "step_00000005");
  const LoadResult r = load_at({1, 2, 1}, root.path());
  if (r.member) {
    EXPECT_EQ(r.error, "");
    EXPECT_EQ(r.meta.step, 5);
    EXPECT_EQ(r.bad, 0);
  }
  if (world_rank() == 0)
    for (const auto& e : fs::directory_iterator(root.path()))
      EXPECT_EQ(e.path().filename().string().rfind(".tmp", 0), std::string::npos) << e.path();
}

TEST_F(CheckpointTest, IncompleteCheckpointIsRejected) {
  TempRoot root;
  save_at({2, 2, 2}, root.path(), 1, 0);
  const std::string dir2 = save_at({2, 2, 2}, root.path(), 2, 0);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    fs::remove(dir2 + "/COMPLETE");
    // A save that died midway leaves only a temporary folder.
    fs::create_directories(root.path() + "/.tmp-step_00000003");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const LoadResult bad = load_at({2, 2, 2}, root.path() + "/step_00000002");
  EXPECT_NE(bad.error.find("incomplete checkpoint"), std::string::npos) << bad.error;
  // `latest` names the incomplete one: the root resolves to the newest complete step.
  EXPECT_EQ(latest_checkpoint(root.path()), root.path() + "/step_00000001");
  const LoadResult r = load_at({1, 1, 2}, root.path());
  if (r.member) {
    EXPECT_EQ(r.error, "");
    EXPECT_EQ(r.meta.step, 1);
    EXPECT_EQ(r.bad, 0);
  }
  if (world_rank() == 0) {
    EXPECT_THROW(inspect_checkpoint(dir2), Error);
    EXPECT_EQ(latest_checkpoint(root.path() + "/nowhere"), "");
  }
  // The next save clears the leftovers of the dead one.
  save_at({2, 2, 2}, root.path(), 3, 0);
  EXPECT_TRUE(fs::exists(root.path() + "/step_00000003/COMPLETE"));
}

TEST_F(CheckpointTest, FlippedByteNamesShardAndTensor) {
  TempRoot root;
  const std::string dir = save_at({2, 2, 2}, root.path(), 1, 0);
  const std::string tensor = "model/blocks.0.attn.qkv.weight";
  std::string shard;
  if (world_rank() == 0) {
    shard = shard_holding(dir, tensor);
    EXPECT_NE(shard, "");
    EXPECT_TRUE(flip_byte(dir + "/" + shard, tensor));
    std::size_t nans = 0;
    const std::string vds = read_through_vds(dir + "/index.h5", tensor, &nans);
    std::printf("[ checkpoint ] HDF5 %d.%d.%d reading through the VDS, corrupt source: %s\n",
                H5_VERS_MAJOR, H5_VERS_MINOR, H5_VERS_RELEASE,
                vds.empty() ? "reads without error" : "the read fails (Fletcher32 checked)");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // Ranks 0 and 2 read that piece; the error reaches every rank.
  const LoadResult r = load_at({2, 2, 2}, dir);
  EXPECT_NE(r.error.find("shard_tp0_pp0_dp"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find(tensor), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("checksum"), std::string::npos) << r.error;
  if (world_rank() == 0) {
    std::printf("[ checkpoint ] flipped byte: %s\n", r.error.c_str());
    try {
      inspect_checkpoint(dir);
      ADD_FAILURE() << "inspect passed a corrupt shard";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(shard), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(tensor), std::string::npos) << e.what();
    }
  }
  // A rank that needs none of the corrupt piece still fails with the others (agreed error).
  const LoadResult one = load_at({1, 1, 1}, dir);
  if (one.member) EXPECT_NE(one.error.find("checksum"), std::string::npos) << one.error;
}

TEST_F(CheckpointTest, TruncatedOrMissingShardNamesFileAndTensor) {
  TempRoot root;
  const std::string dir = save_at({2, 2, 2}, root.path(), 1, 0);
  const std::string shard = "shard_tp1_pp1_dp0.h5";
  if (world_rank() == 0) fs::resize_file(dir + "/" + shard, fs::file_size(dir + "/" + shard) / 2);
  MPI_Barrier(MPI_COMM_WORLD);
  const LoadResult r = load_at({1, 1, 1}, dir);
  if (r.member) {
    EXPECT_NE(r.error.find(shard), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("tensor 'model/blocks."), std::string::npos) << r.error;
    std::printf("[ checkpoint ] truncated: %s\n", r.error.c_str());
  }
  if (world_rank() == 0) {
    fs::remove(dir + "/" + shard);
    std::size_t nans = 0;
    const std::string vds =
        read_through_vds(dir + "/index.h5", "model/blocks.2.attn.qkv.weight", &nans);
    std::printf(
        "[ checkpoint ] HDF5 %d.%d.%d reading through the VDS, missing source: %s, %zu NaN "
        "(the fill value) of 3072\n",
        H5_VERS_MAJOR, H5_VERS_MINOR, H5_VERS_RELEASE,
        vds.empty() ? "reads without error" : "the read fails", nans);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // Read through the VDS a missing source would be silent NaN; the loader names it.
  const LoadResult m = load_at({2, 2, 2}, dir);
  EXPECT_NE(m.error.find(shard + ": missing shard file"), std::string::npos) << m.error;
}

TEST_F(CheckpointTest, ModelConfigMismatchListsDifferences) {
  TempRoot root;
  save_at({2, 2, 2}, root.path(), 1, 0);
  DiTConfig other = model();
  other.depth = 6;
  other.hidden_size = 64;
  const LoadResult r = load_at({2, 1, 1}, root.path(), other);
  if (r.member) {
    EXPECT_NE(r.error.find("depth 4 vs 6"), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("hidden_size 32 vs 64"), std::string::npos) << r.error;
    EXPECT_EQ(r.error.find("num_heads"), std::string::npos) << r.error;
  }
  // A tensor the index lacks is named.
  const LoadResult x =
      load_at({1, 1, 1}, root.path(), model(), {ParamSpec{"extra.weight", {4, 4}}});
  if (x.member)
    EXPECT_NE(x.error.find("'model/extra.weight' is missing"), std::string::npos) << x.error;
  if (world_rank() == 0) {
    const DiTConfig c = read_checkpoint_model(root.path());
    EXPECT_EQ(c.depth, 4);
    EXPECT_EQ(c.hidden_size, 32);
    EXPECT_EQ(read_checkpoint_meta(root.path()).step, 1);
  }
}

// Replaces a virtual dataset of index.h5 by a plain one holding the tensor (what a converter of
// single-file weights may write).
bool make_plain(const std::string& index, const std::string& dataset) {
  hid_t f = H5Fopen(index.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  hid_t space = H5Dget_space(d);
  std::vector<float> v(std::size_t(H5Sget_simple_extent_npoints(space)));
  bool ok = H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0;
  H5Dclose(d);
  ok = ok && H5Ldelete(f, dataset.c_str(), H5P_DEFAULT) >= 0;
  d = H5Dcreate2(f, dataset.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ok = ok && H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0;
  H5Dclose(d);
  H5Sclose(space);
  H5Fclose(f);
  return ok;
}

TEST_F(CheckpointTest, PlainDatasetsInTheIndexLoad) {
  TempRoot root;
  const std::string dir = save_at({2, 2, 2}, root.path(), 2, 0);
  if (world_rank() == 0) {
    EXPECT_TRUE(make_plain(dir + "/index.h5", "model/final_layer.linear.weight"));
    EXPECT_TRUE(make_plain(dir + "/index.h5", "ema/blocks.1.attn.qkv.weight"));
    // A converter that rewrites the index records its new checksum, as a save does.
    std::ofstream(dir + "/COMPLETE") << ckpt::complete_text(2, ckpt::file_sum(dir + "/index.h5"));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (const Layout& l : {Layout{2, 1, 1}, Layout{4, 2, 1}}) {
    const LoadResult r = load_at(l, dir);
    if (!r.member) continue;
    EXPECT_EQ(r.error, "") << l.str();
    EXPECT_EQ(r.bad, 0) << l.str();
  }
}

// Recomputes expected() in numpy for every dataset of index.h5 (run from / so the relative source
// names must resolve against the index's folder).
constexpr const char* kPython = R"PY(
import sys, h5py, numpy as np
def fnv(s):
    h = 1469598103934665603
    for ch in s.encode():
        h = ((h ^ ch) * 1099511628211) & (2**64 - 1)
    return h
f = h5py.File(sys.argv[1], "r")
n = bad = 0
for k, kind in enumerate(["model", "ema", "exp_avg", "exp_avg_sq"]):
    for name, d in f[kind].items():
        a = d[...]
        idx = np.arange(a.size, dtype=np.int64)
        m = ((fnv(name) * 2654435761 + k * 7919 + 1) % 2**23 + idx * 40503) % 2**23
        want = ((m.astype(np.float32) - np.float32(2**22)) / np.float32(1024)).reshape(a.shape)
        n += 1
        bad += int(np.count_nonzero(a.view(np.uint32) != want.view(np.uint32)))
print("qkv", tuple(f["model/blocks.0.attn.qkv.weight"].shape), "tensors", n, "bad", bad,
      "step", int(f.attrs["step"]), "depth", int(f["config"].attrs["depth"]))
)PY";

TEST_F(CheckpointTest, H5pySeesFullTensors) {
  int have = 0;
  if (world_rank() == 0)
    have = std::system("/usr/bin/python3 -c 'import h5py' >/dev/null 2>&1") == 0;
  MPI_Bcast(&have, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!have)
    GTEST_SKIP() << "/usr/bin/python3 has no h5py (install python3-h5py to run this check)";
  TempRoot root;
  const std::string dir = save_at({2, 2, 2}, root.path(), 3, 0);
  if (world_rank() != 0) return;
  const std::string script = root.path() + "/check.py";
  std::ofstream(script) << kPython;
  const std::string cmd = "cd / && /usr/bin/python3 " + script + " " + dir + "/index.h5 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  EXPECT_EQ(pclose(p), 0) << out;
  const std::size_t tensors = 4 * DiTStage::declare(model(), StageLayout::whole(model())).size();
  EXPECT_EQ(out, "qkv (96, 32) tensors " + std::to_string(tensors) + " bad 0 step 3 depth 4\n");
}

TEST_F(CheckpointTest, SaveErrorsAreAgreedAndLeaveNothing) {
  TempRoot root;
  auto ctx = join({2, 2, 2});
  if (!ctx) return;
  CpuBackend be;
  auto ps = stage_params(be, model(), *ctx);
  StageState st = make_state(*ps);
  if (ctx->world_rank == 5) st.ema.pop_back();  // one rank passes a short state
  try {
    save_checkpoint(root.path(), meta_for(1), model(), *ps, *ctx, st, 0);
    ADD_FAILURE() << "saved a short state";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("state 'ema' has"), std::string::npos) << e.what();
  }
  ctx->world->barrier();
  EXPECT_EQ(latest_checkpoint(root.path()), "");
  EXPECT_FALSE(fs::exists(root.path() + "/step_00000001"));
}

}  // namespace dit
