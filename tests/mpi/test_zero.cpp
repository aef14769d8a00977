// ZeRO levels (up to 8 ranks): at dp 2 and dp 4, alone and with tp 2 or pp 2, levels 1, 2 and 3
// train the same bits over 5 steps with gradient accumulation (losses, gradient norms, master
// weights, Adam moments and EMA), with communication overlapped or not, buckets of any size and
// the optimizer offloaded to host memory or not; level 3 holds about a quarter of the parameters at dp 4 and
// level 2 and 3 hand gradient memory back.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "engine/trainer.h"
#include "parallel/backend_comms.h"
#include "parallel/mpi_comm.h"
#include "tiny_model.h"

namespace dit {

namespace {

constexpr int kSteps = 5;

struct ZeroCase {
  Layout layout;
  ScheduleKind schedule = ScheduleKind::OneFOneB;
  int virtual_stages = 1;
  DType precision = DType::F32;
  int depth = 4;
};

struct ZeroRun {
  std::vector<double> losses, norms;
  StageState state;
  MemoryAccount memory;
  bool ran = false;
  int reduce_scatters = 0;  // on a collectives-only dp communicator
};

// A data-parallel communicator as NCCL's is to ZeRO: collectives reach every rank, sends reach none
// but pipeline neighbours (here none at all: a send fails the test). Counts its reduce-scatters.
class CollectivesOnly final : public Comm {
 public:
  explicit CollectivesOnly(std::unique_ptr<Comm> inner) : inner_(std::move(inner)) {}
  int size() const override { return inner_->size(); }
  int rank() const override { return inner_->rank(); }
  void all_reduce_sum(const Tensor& x) override { inner_->all_reduce_sum(x); }
  void all_gather(const Tensor& in, const Tensor& out) override { inner_->all_gather(in, out); }
  void reduce_scatter_sum(const Tensor& in, const Tensor& out) override {
    ++reduce_scatters;
    inner_->reduce_scatter_sum(in, out);
  }
  void broadcast(const Tensor& x, int root) override { inner_->broadcast(x, root); }
  void barrier() override { inner_->barrier(); }
  double all_reduce_max(double v) override { return inner_->all_reduce_max(v); }
  void all_reduce_sum(double* v, int n) override { inner_->all_reduce_sum(v, n); }
  Request isend(const Tensor&, int peer, int) override { DIT_FAIL("a send to dp rank ", peer, " without sends"); }
  Request irecv(const Tensor&, int peer, int) override { DIT_FAIL("a receive from dp rank ", peer, " without sends"); }
  void wait(Request& r) override { inner_->wait(r); }
  bool sends_to_any_rank() const override { return false; }
  int reduce_scatters = 0;

 private:
  std::unique_ptr<Comm> inner_;
};

ZeroRun run_zero(const ZeroCase& c, int level, double bucket_mib, bool overlap, bool offload = false,
                 bool collectives_only = false) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  auto world = MpiComm::world();
  auto sub = MpiComm::split(*world, rank < c.layout.world() ? 0 : 1, rank);
  ZeroRun r;
  if (rank >= c.layout.world()) return r;
  auto be = make_backend("cpu", c.precision);
  SyntheticDataset data({2, 8, 8}, 5, 64, 9);
  ParallelContext ctx = make_mpi_context(c.layout, std::move(sub));
  if (c.precision != DType::F32) attach_backend_comms(ctx, *be);
  CollectivesOnly* only = nullptr;
  if (collectives_only) {
    auto wrapped = std::make_unique<CollectivesOnly>(std::move(ctx.dp));
    only = wrapped.get();
    ctx.dp = std::move(wrapped);
  }
  TrainConfig tc;
  tc.global_batch = 8;
  tc.micro_batch = 1;  // 8 / dp microbatches per step: the gradients accumulate
  tc.steps = kSteps;
  tc.adamw.lr = 1e-3;
  tc.grad_clip = 0.5;  // clips: the norm's sum order matters
  tc.ema_decay = 0.99;
  tc.seed = 5;
  tc.schedule = c.schedule;
  tc.virtual_stages = c.virtual_stages;
  tc.stage.placement = placement_of(c.schedule);
  tc.grad_reduce = c.precision == DType::F32 ? DType::F32 : DType::BF16;
  tc.zero = level;
  tc.bucket_mib = bucket_mib;
  tc.overlap = overlap;
  tc.offload = offload;
  Trainer trainer(*be, ctx, tiny_dit(2, c.depth, 4, 5), tc, data);
  for (int i = 0; i < kSteps; ++i) {
    const StepStats st = trainer.step();
    r.losses.push_back(st.loss);
    r.norms.push_back(st.grad_norm);
  }
  r.state = trainer.state();
  r.memory = trainer.memory();
  r.ran = true;
  if (only) r.reduce_scatters = only->reduce_scatters;
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string case_name(const ZeroCase& c) {
  std::string s = "tp" + std::to_string(c.layout.tp) + "_pp" + std::to_string(c.layout.pp) + "_dp" +
                  std::to_string(c.layout.dp) + "_" + std::string(schedule_name(c.schedule));
  if (c.virtual_stages > 1) s += "_v" + std::to_string(c.virtual_stages);
  if (c.precision != DType::F32) s += "_" + std::string(dtype_name(c.precision));
  for (char& ch : s)
    if (ch == '-') ch = '_';  // zb-h1: a test name takes letters, digits and _
  return s;
}

}  // namespace

class ZeroLevels : public ::testing::TestWithParam<ZeroCase> {};

// Levels 1, 2 and 3 (and level 1 with small buckets) give bit-identical steps at one layout.
TEST_P(ZeroLevels, BitIdenticalAcrossLevels) {
  const ZeroCase c = GetParam();
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (c.layout.world() > size) GTEST_SKIP() << c.layout.str() << " needs " << c.layout.world() << " ranks";
  // The reference: zero 1 reducing after the backward. A bucket of 1 KiB: many rounds per unit
  // and per shard; 0.15 MiB: about two units a bucket; 25 MiB: the whole model one bucket; overlap:
  // buckets reduced during the backward, zero 3 fetching ahead.
  const ZeroRun one = run_zero(c, 1, 25, false);
  const ZeroRun runs[] = {run_zero(c, 1, 1.0 / 1024, true), run_zero(c, 2, 1.0 / 1024, false),
                          run_zero(c, 2, 0.15, true), run_zero(c, 3, 25, false), run_zero(c, 3, 1.0 / 1024, true),
                          run_zero(c, 1, 1.0 / 1024, true, true), run_zero(c, 2, 0.15, true, true),
                          run_zero(c, 3, 25, true, true)};
  if (!one.ran) return;
  EXPECT_NE(one.losses.front(), one.losses.back());
  const char* names[] = {"zero 1 (1 KiB, overlap)", "zero 2 (1 KiB)",   "zero 2 (0.15 MiB, overlap)",
                         "zero 3",                  "zero 3 (1 KiB, overlap)", "zero 1 offloaded (1 KiB)",
                         "zero 2 offloaded (0.15 MiB, overlap)", "zero 3 offloaded"};
  for (int k = 0; k < 8; ++k) {
    const ZeroRun& r = runs[k];
    for (int i = 0; i < kSteps; ++i) {
      EXPECT_EQ(r.losses[i], one.losses[i]) << names[k] << " step " << i;
      EXPECT_EQ(r.norms[i], one.norms[i]) << names[k] << " step " << i;
    }
    EXPECT_TRUE(same_bits(r.state.model, one.state.model)) << names[k] << ": master weights";
    EXPECT_TRUE(same_bits(r.state.exp_avg, one.state.exp_avg)) << names[k] << ": exp_avg";
    EXPECT_TRUE(same_bits(r.state.exp_avg_sq, one.state.exp_avg_sq)) << names[k] << ": exp_avg_sq";
    EXPECT_TRUE(same_bits(r.state.ema, one.state.ema)) << names[k] << ": EMA";
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    std::printf("[ zero %s ] losses %.6f .. %.6f; param bytes zero 1 %zu, zero 3 %zu; grad bytes zero 1 %zu, "
                "zero 2 %zu (1 KiB buckets)\n",
                case_name(c).c_str(), one.losses.front(), one.losses.back(), one.memory.params,
                runs[3].memory.params, runs[0].memory.grads, runs[1].memory.grads);
}

INSTANTIATE_TEST_SUITE_P(
    Zero, ZeroLevels,
    ::testing::Values(ZeroCase{{1, 1, 2}}, ZeroCase{{1, 1, 4}}, ZeroCase{{2, 1, 2}}, ZeroCase{{2, 1, 4}},
                      ZeroCase{{1, 2, 2}}, ZeroCase{{1, 2, 4}}, ZeroCase{{1, 2, 2}, ScheduleKind::ZbH1},
                      ZeroCase{{1, 2, 2}, ScheduleKind::OneFOneB, 2, DType::F32, 8},
                      ZeroCase{{1, 1, 4}, ScheduleKind::OneFOneB, 1, DType::BF16}),
    [](const auto& info) { return case_name(info.param); });

// At dp 4 with one microbatch a step, zero 3 holds its shard and about one unit of the parameters,
// and zero 2 and 3 about one unit of the full gradients (besides the reduced shard and the
// staging of 1 KiB messages).
TEST(ZeroMemory, ShardsHoldAboutAQuarter) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 4) GTEST_SKIP() << "needs 4 ranks";
  ZeroCase c{{1, 1, 4}};
  c.depth = 16;
  auto run = [&](int level) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    auto world = MpiComm::world();
    auto sub = MpiComm::split(*world, rank < 4 ? 0 : 1, rank);
    MemoryAccount m;
    if (rank >= 4) return m;
    CpuBackend be;
    SyntheticDataset data({2, 8, 8}, 5, 64, 9);
    ParallelContext ctx = make_mpi_context(c.layout, std::move(sub));
    TrainConfig tc;
    tc.global_batch = 4;
    tc.micro_batch = 1;  // one microbatch: each unit's gradients are final after its one backward
    tc.steps = 2;
    tc.zero = level;
    tc.bucket_mib = 1.0 / 1024;
    tc.overlap = false;  // one unit's parameters at a time
    Trainer trainer(be, ctx, tiny_dit(2, c.depth, 4, 5), tc, data);
    trainer.step();
    trainer.step();
    return trainer.memory();
  };
  const MemoryAccount m1 = run(1), m2 = run(2), m3 = run(3);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank >= 4) return;
  const double p = double(m3.params) / double(m1.params);
  const double g2 = double(m2.grads) / double(m1.grads), g3 = double(m3.grads) / double(m1.grads);
  EXPECT_EQ(m2.params, m1.params);
  EXPECT_LT(p, 0.40) << "zero 3 parameter bytes " << m3.params << " of " << m1.params;
  EXPECT_GT(p, 0.25);
  EXPECT_LT(g2, 0.45) << "zero 2 gradient bytes " << m2.grads << " of " << m1.grads;
  EXPECT_EQ(m3.grads, m2.grads);
  EXPECT_EQ(m3.exp_avg, m1.exp_avg);
  if (rank == 0)
    std::printf("[ zero memory dp 4, depth %d ] params %zu / %zu / %zu bytes (zero 3: %.3f), grads %zu / %zu / %zu "
                "(zero 2: %.3f, zero 3: %.3f)\n",
                c.depth, m1.params, m2.params, m3.params, p, m1.grads, m2.grads, m3.grads, g2, g3);
}

}  // namespace dit

namespace dit {

// optim.offload = "cpu": the master weights, Adam moments and EMA live in memory of the host
// backend the optimizer made (not the training backend's), their bytes counted as host bytes and
// none as device bytes; the parameters and gradients stay on the training backend.
TEST(ZeroOffload, StateLivesInHostMemory) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  auto world = MpiComm::world();
  auto sub = MpiComm::split(*world, rank < 2 ? 0 : 1, rank);
  if (rank >= 2) return;
  CpuBackend be;
  SyntheticDataset data({2, 8, 8}, 5, 64, 9);
  ParallelContext ctx = make_mpi_context({1, 1, 2}, std::move(sub));
  TrainConfig tc;
  tc.global_batch = 4;
  tc.micro_batch = 2;
  tc.offload = true;
  tc.bucket_mib = 1.0 / 1024;  // pieces of 256 gradients between the backends
  MemoryAccount kept;  // the same run with the state on the device
  {
    TrainConfig on_device = tc;
    on_device.offload = false;
    Trainer t(be, ctx, tiny_dit(2, 2, 4, 5), on_device, data);
    t.step();
    kept = t.memory();
  }
  Trainer trainer(be, ctx, tiny_dit(2, 2, 4, 5), tc, data);
  trainer.step();
  const Optimizer& o = trainer.optimizer().shard();
  const auto* host = dynamic_cast<const CpuBackend*>(&o.state_backend());
  ASSERT_NE(host, nullptr);
  EXPECT_NE(static_cast<const Backend*>(host), static_cast<const Backend*>(&be));
  for (const Tensor& t : {o.master(), o.exp_avg(), o.exp_avg_sq(), o.ema()}) {
    EXPECT_TRUE(host->owns(t.data));
    EXPECT_FALSE(be.owns(t.data));
  }
  EXPECT_TRUE(be.owns(o.params().data));
  const MemoryAccount m = trainer.memory();
  const std::size_t shard = static_cast<std::size_t>(trainer.optimizer().shard_size());
  EXPECT_EQ(m.master + m.exp_avg + m.exp_avg_sq + m.ema, 0u);
  // The state, the reduced gradients of the shard (ZeRO-Offload) and one piece of staging each way;
  // on the device the reduced shard gives way to one piece summed on its way down.
  EXPECT_EQ(m.host, shard * 4 * 4 + shard * 4 + 256 * 4 + 256 * 4);
  EXPECT_EQ(m.grads, kept.grads - shard * 4 + 256 * 4);
  if (rank == 0)
    std::printf("[ zero offload ] shard of %zu parameters: %zu host bytes, %zu device bytes\n", shard, m.host,
                m.total());
}

}  // namespace dit

namespace dit {

// The gradient norm's kernel takes int32 offsets, so a shard is summed in parts (ZeroOptions::
// norm_part, 2^30 elements; a shard of DiT-8B/2 at dp 2 is 4.26 billion): parts of 7 and 1000
// elements, tensors split across their borders, give the norm of one part within double rounding,
// and the padding past the last tensor (filled here) stays out of it.
TEST(ZeroNorm, ShardSummedInPartsAsWhole) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  auto world = MpiComm::world();
  ParallelContext ctx = make_mpi_context({1, 1, 1}, MpiComm::split(*world, rank, 0));
  CpuBackend be;
  const DiTConfig m = tiny_dit(2, 2, 4, 5);
  const auto norm = [&](std::int64_t part) {
    ParamSet ps(be, DiTStage::declare(m, StageLayout::whole(m)), 1, 0, 1000);  // padding past the last tensor
    EXPECT_GT(ps.padded_numel(), ps.numel());
    float* g = ps.flat_grads().f32();
    for (std::int64_t i = 0; i < ps.padded_numel(); ++i) g[i] = std::sin(0.37f * float(i)) * (i % 5 == 0 ? 3.f : 1.f);
    ZeroOptions o;
    o.norm_part = part;
    ZeroOptimizer zero(be, ps, ctx, o);
    return zero.step(AdamWConfig{}, 1e-3, 1, 0.0, 0.99).grad_norm;
  };
  const double whole = norm(std::int64_t{1} << 30);
  double direct = 0;  // the norm of the tensors' gradients, summed here
  {
    ParamSet ps(be, DiTStage::declare(m, StageLayout::whole(m)), 1, 0, 1);
    for (std::size_t i = 0; i < ps.size(); ++i)
      for (std::int64_t k = 0; k < ps.specs()[i].local(1).numel(); ++k) {
        const std::int64_t at = ps.offset(static_cast<int>(i)) + k;
        const double v = std::sin(0.37f * float(at)) * (at % 5 == 0 ? 3.f : 1.f);
        direct += v * v;
      }
  }
  EXPECT_NEAR(whole, std::sqrt(direct), 1e-9 * std::sqrt(direct));
  for (std::int64_t part : {7, 1000})
    EXPECT_NEAR(norm(part), whole, 1e-12 * whole) << "parts of " << part << " elements";
}

// Where the dp communicator's sends reach pipeline neighbours only (NCCL), level 1 keeps to the
// transport's reduce-scatter and all-gather (overlap asked for or not): at dp 2, where a sum of
// two has one order, the same bits as the rank-ordered sum; at dp 4 the transport's order, within
// 1e-5 (fp32) and 2e-2 (bf16 on the wire, summed there) of the losses and of the first Adam moment
// (relative L2: the reduced gradients). Offloaded, the shard in host memory, it is reduce-scattered
// a piece at a time (the same bounds). Levels 2 and 3 are refused naming optim.zero.
TEST(ZeroCollectives, LevelOneOnACommunicatorWithoutSends) {
  int size = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (size < 4) GTEST_SKIP() << "needs 4 ranks";
  const ZeroCase cases[] = {ZeroCase{{1, 1, 2}}, ZeroCase{{1, 1, 4}},
                            ZeroCase{{1, 1, 4}, ScheduleKind::OneFOneB, 1, DType::BF16}};
  for (const ZeroCase& c : cases)
    for (const bool offload : {false, true}) {
      const ZeroRun ref = run_zero(c, 1, 25, true);
      // Offloaded, the reduced shard is in host memory: reduce-scattered a piece (1 KiB) at a time.
      const double bucket = c.precision == DType::F32 && !offload ? 25 : 1.0 / 1024;
      const ZeroRun got = run_zero(c, 1, bucket, true, offload, true);
      if (!ref.ran) continue;
      EXPECT_GE(got.reduce_scatters, offload ? 2 * kSteps : kSteps) << case_name(c);
      const double tol = c.layout.dp == 2 ? 0 : c.precision == DType::F32 ? 1e-5 : 2e-2;
      for (int i = 0; i < kSteps; ++i)
        EXPECT_LE(std::abs(got.losses[i] - ref.losses[i]), tol * std::abs(ref.losses[i])) << case_name(c) << " step " << i;
      if (c.layout.dp == 2) EXPECT_TRUE(same_bits(got.state.model, ref.state.model)) << case_name(c);
      // The reduced gradients themselves, through the first Adam moment: relative L2 error.
      double diff = 0, norm = 0;
      for (std::size_t k = 0; k < ref.state.exp_avg.size(); ++k) {
        diff += std::pow(double(got.state.exp_avg[k]) - ref.state.exp_avg[k], 2);
        norm += std::pow(double(ref.state.exp_avg[k]), 2);
      }
      EXPECT_LE(std::sqrt(diff / norm), tol) << case_name(c) << ": exp_avg";
      if (rank == 0)
        std::printf("[ zero collectives %s%s ] losses %.6f .. %.6f (rank-ordered %.6f .. %.6f), %d reduce-scatters\n",
                    case_name(c).c_str(), offload ? " offloaded" : "", got.losses.front(), got.losses.back(),
                    ref.losses.front(), ref.losses.back(), got.reduce_scatters);
    }
  for (int level : {2, 3}) {
    std::string error;
    try {
      run_zero(ZeroCase{{1, 1, 2}}, level, 25, true, false, true);
    } catch (const Error& e) {
      error = e.what();
    }
    if (rank < 2) EXPECT_NE(error.find("optim.zero = " + std::to_string(level)), std::string::npos) << error;
  }
}

}  // namespace dit
