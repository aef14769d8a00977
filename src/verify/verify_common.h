// The pieces every verify group shares: the report of relative L2 errors per tensor (one
// tolerance rule: 1e-4 for fp32, 2e-2 for bf16/fp16 storage, 1e-12 for float64 host math) and the
// runner that loads a golden file's weights into this rank's slice of the model and runs batches
// through the pipeline at the layout. Internal to app/ (verify_cmd.cpp, verify_flow.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "verify/verify.h"
#include "backend/backend.h"
#include "diffusion/losses.h"
#include "diffusion/objective.h"
#include "engine/dit_pipeline.h"
#include "engine/global_tensors.h"
#include "io/golden.h"

namespace dit::verify {

inline constexpr double kTolF32 = 1e-4;   // float32 computation against float64 references
inline constexpr double kTol16 = 2e-2;    // bf16/fp16 storage (fp32 arithmetic) against float64 references
inline constexpr double kTolF64 = 1e-12;  // float64 schedule arrays
inline constexpr double kTolCompute = -1; // the tolerance of the backend's precision (Report's)

// One reported tensor. Every rank holds the same list; d2 and r2 are this rank's contribution
// to ||a - b||^2 and ||b||^2, summed over ranks before printing.
struct Row {
  std::string name;
  double tol;
  double d2 = 0, r2 = 0;
  double err() const { return r2 > 0 ? std::sqrt(d2 / r2) : std::sqrt(d2); }
  bool pass() const { return std::isfinite(err()) && err() <= tol; }
};

class Report {
 public:
  // compute_tol: the tolerance of tensors the backend computed (kTolF32 or kTol16).
  Report(ParallelContext& ctx, double compute_tol) : ctx_(ctx), compute_tol_(compute_tol) {}
  // Adds a comparison computed on the full tensors; counted on world rank 0 only.
  template <typename T>
  void full(const std::string& name, const std::vector<T>& ours, const std::vector<double>& want,
            double tol = kTolCompute) {
    Row r{name, tol == kTolCompute ? compute_tol_ : tol};
    if (ctx_.world_rank == 0) {
      DIT_CHECK(ours.size() == want.size(), name, ": comparison of ", ours.size(), " values with ", want.size());
      for (std::size_t i = 0; i < ours.size(); ++i) {
        const double d = static_cast<double>(ours[i]) - want[i];
        r.d2 += d * d;
        r.r2 += want[i] * want[i];
      }
    }
    rows_.push_back(r);
  }
  // Sums every rank's contributions and prints; returns the number of failed rows.
  int finish(const std::string& header);

 private:
  ParallelContext& ctx_;
  double compute_tol_;
  std::vector<Row> rows_;
};

inline std::vector<float> to_f32(const std::vector<double>& v) { return {v.begin(), v.end()}; }
inline std::vector<double> to_f64(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Returns dL/d output for samples [first, first + count) given their outputs; empty = no backward.
using DoutFn = std::function<std::vector<float>(std::int64_t first, std::int64_t count,
                                                const std::vector<float>& out)>;

// This rank's slice of the model, loaded with the golden weights, run through the pipeline.
// A batch of N samples is split over dp ranks and then microbatches.
class Runner {
 public:
  Runner(Backend& be, ParallelContext& ctx, const GoldenFile& g, const VerifyOptions& opt)
      : be_(be), ctx_(ctx), cfg_(g.config()), opt_(opt) {
    const auto chunks = partition_chunks(cfg_, ctx.layout.pp, opt.virtual_stages);
    model_ = std::make_unique<DiTStage>(be, cfg_, chunks_of_stage(chunks, ctx.layout.pp, ctx.coord.pp, opt.stage.placement), *ctx.tp,
                                        ctx.layout.dp, opt.stage);
    g.load_params(model_->params(), "/weights");
    executor_ = std::make_unique<PipelineExecutor>(*ctx.pp, be);
  }
  DiTStage& model() { return *model_; }

  // Runs x (N, C, H, W), model timesteps t, labels y; returns the full model output on every
  // rank. With dout, also backward (parameter grads summed over dp; dx returned via *dx).
  std::vector<float> run(const std::vector<float>& x, const std::vector<float>& t,
                         const std::vector<std::int32_t>& y, const DoutFn& dout,
                         std::vector<float>* dx = nullptr, int microbatches = 1);

  std::map<std::string, std::vector<float>> grads() {
    return gather_global(*model_, ctx_, host_copy(be_, model_->params().flat_grads()));
  }

 private:
  Backend& be_;
  ParallelContext& ctx_;
  DiTConfig cfg_;
  VerifyOptions opt_;
  std::unique_ptr<DiTStage> model_;
  std::unique_ptr<PipelineExecutor> executor_;
};

inline Shape image_shape(const DiTConfig& c, std::int64_t n, int channels) {
  return {n, channels, c.input_size, c.input_size};
}

// Every parameter tensor of the model against `group`<name> of the file.
void compare_params(Report& rep, const GoldenFile& g, const std::string& prefix,
                    const std::map<std::string, std::vector<float>>& ours, const std::string& group);


// The recipe a golden file was computed for, from its /config attributes (objective,
// timestep_sampling, logit_normal_mean/std, cosine_loss, loss_weight, min_snr_gamma); a file
// without them means the official DiT (ddpm, uniform, no cosine term, no weighting).
diffusion::TrainObjective golden_objective(const GoldenFile& g);

// What the backend's loss kernel reads for a golden batch: the kind, the path's rows
// (kNumLossCoefs each) and each sample's row.
struct LossSetup {
  math::LossKind kind;
  std::vector<float> table;       // (rows, math::kNumLossCoefs)
  std::vector<std::int32_t> row;  // (n,)
};
// The training loss as training computes it, on the backend (Backend::sample_loss), for
// samples [first, first + count) of a batch of n: their per-sample terms (loss, mse, extra) and
// d mean_n(loss) / d out. x_start is the data, noise the noise (both (n, C, H, W)).
struct BackendLossResult {
  std::vector<float> dout, terms;
};
BackendLossResult backend_loss(Backend& be, const DiTConfig& cfg, const LossSetup& setup, const std::vector<float>& out,
                               const std::vector<double>& x_start, const std::vector<double>& noise,
                               std::int64_t first, std::int64_t count, std::int64_t n);

// ddpm with loss_weight = min_snr: /loss/weight against the float64 weights, /loss/mse_raw
// against the backend's (unweighted) mse and /loss/mse (the reference's weighted term) against
// w mse; /loss/loss = w mse + vb is checked by the caller.
void verify_min_snr_weights(const GoldenFile& g, const diffusion::Schedule& sched,
                            const diffusion::TrainObjective& recipe, const std::vector<float>& terms, Report& rep);

// The flow groups (verify_flow.cpp): /loss with (x1, noise, continuous t), /timesteps, and
// /sample/<sampler> steps with /sample/cfg.
void verify_flow_loss(Backend& be, ParallelContext& ctx, const GoldenFile& g, const VerifyOptions& opt, Report& rep);
void verify_timesteps(const GoldenFile& g, Report& rep);
void verify_flow_sample(Backend& be, ParallelContext& ctx, const GoldenFile& g, const VerifyOptions& opt, Report& rep);

// The /distill group (verify_distill.cpp): knowledge distillation's loss terms and gradients
// (Backend::sample_loss: the diffusion, output and feature losses, as training calls them) on world
// rank 0. check_distill_group reads and checks every dataset and attribute the group needs
// (errors name them), alike on every rank.
void check_distill_group(const GoldenFile& g);
void verify_distill(Backend& be, ParallelContext& ctx, const GoldenFile& g, Report& rep);

}  // namespace dit::verify
