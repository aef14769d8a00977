// The shared pieces of verify (see verify_common.h).
#include "verify/verify_common.h"

#include <algorithm>
#include <cstdio>

#include "engine/global_tensors.h"

namespace dit::verify {

int Report::finish(const std::string& header) {
  std::vector<double> sums;
  for (const Row& r : rows_) {
    sums.push_back(r.d2);
    sums.push_back(r.r2);
  }
  ctx_.world->all_reduce_sum(sums.data(), static_cast<int>(sums.size()));
  int failed = 0;
  double worst = 0;
  if (ctx_.world_rank == 0) std::printf("%s\n%-56s %12s %10s  %s\n", header.c_str(), "tensor", "rel_l2", "tol", "result");
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    Row& r = rows_[i];
    r.d2 = sums[2 * i];
    r.r2 = sums[2 * i + 1];
    failed += !r.pass();
    worst = std::max(worst, r.err());
    if (ctx_.world_rank == 0)
      std::printf("%-56s %12.3e %10.1e  %s\n", r.name.c_str(), r.err(), r.tol, r.pass() ? "PASS" : "FAIL");
  }
  if (ctx_.world_rank == 0)
    std::printf("%zu passed, %d failed (worst relative error %.3e)\n", rows_.size() - failed, failed, worst);
  if (rows_.empty() && ctx_.world_rank == 0) std::printf("nothing was compared: that is a failure\n");
  return rows_.empty() ? 1 : failed;
}

std::vector<float> Runner::run(const std::vector<float>& x, const std::vector<float>& t,
                               const std::vector<std::int32_t>& y, const DoutFn& dout, std::vector<float>* dx,
                               int microbatches) {
  const std::int64_t n = static_cast<std::int64_t>(t.size()), dp = ctx_.layout.dp;
  DIT_CHECK(n % (dp * microbatches) == 0, "a golden batch of ", n, " samples does not split over dp = ",
            dp, " x ", microbatches, " microbatches; use a layout and --microbatches whose product divides ", n);
  const std::int64_t nmb = n / (dp * microbatches);
  const std::int64_t per_in = x.size() / n, hw = cfg_.input_size;
  const std::int64_t per_out = std::int64_t(cfg_.out_channels()) * hw * hw;
  std::vector<float> out(static_cast<std::size_t>(n * per_out), 0.f);
  if (dx) dx->assign(x.size(), 0.f);
  auto first = [&](int mb) { return (ctx_.coord.dp * microbatches + mb) * nmb; };
  const DType dt = be_.compute_dtype();
  DiTPipelineHooks hooks;
  hooks.make_inputs = [&](int mb, StageInputs& in, Arena& arena) {
    const std::int64_t f = first(mb);
    upload_stage_inputs(be_, cfg_, nmb, {x.data() + f * per_in, t.data() + f, y.data() + f}, in, arena);
  };
  hooks.on_output = [&](int mb, const Tensor& o, Arena& arena) -> Tensor {
    std::vector<float> slice = host_copy(be_, o);
    if (ctx_.coord.tp == 0) std::copy(slice.begin(), slice.end(), out.begin() + first(mb) * per_out);
    if (!dout) return {};
    std::vector<float> d = dout(first(mb), nmb, slice);
    Tensor dt_out = arena.tensor(o.shape, dt);
    be_.copy(dt_out, Tensor{d.data(), DType::F32, o.shape, Device::Host});
    return dt_out;
  };
  if (dx)
    hooks.on_input_grad = [&](int mb, const Tensor& g) {
      if (ctx_.coord.tp != 0) return;
      std::vector<float> v = host_copy(be_, g);
      std::copy(v.begin(), v.end(), dx->begin() + first(mb) * per_in);
    };
  model_->params().zero_grads();
  DiTPipelineStage stage(be_, *model_, nmb, hooks);
  const int pp = ctx_.layout.pp, v = opt_.virtual_stages;
  executor_->run(dout ? make_pipeline_schedule(opt_.schedule, pp, ctx_.coord.pp, microbatches, v)
                      : make_forward_only(microbatches, pp, v),
                 microbatches, stage, opt_.stage.placement);
  // Each sample's output lives on one last-stage rank (tp 0 of its dp replica): sum to all.
  ctx_.world->all_reduce_sum(Tensor{out.data(), DType::F32, {std::int64_t(out.size())}, Device::Host});
  if (dx) ctx_.world->all_reduce_sum(Tensor{dx->data(), DType::F32, {std::int64_t(dx->size())}, Device::Host});
  if (dout) ctx_.dp->all_reduce_sum(model_->params().flat_grads());
  return out;
}

void compare_params(Report& rep, const GoldenFile& g, const std::string& prefix,
                    const std::map<std::string, std::vector<float>>& ours, const std::string& group) {
  const DiTConfig& cfg = g.config();
  for (const ParamSpec& s : DiTStage::declare(cfg, StageLayout::whole(cfg)))
    rep.full(prefix + s.name, ours.at(s.name), g.read(group + s.name, s.global));
}

}  // namespace dit::verify
