// Golden verification: each group compares our outputs with the official float64 numbers using
// one rule, the relative L2 error per tensor ||a - b|| / ||b||, against 1e-4 for fp32.
#include "app/verify.h"

#include <cmath>
#include <cstdio>
#include <memory>

#include "backend/backend.h"
#include "io/golden.h"
#include "layers/dit_stage.h"

namespace dit {

namespace {

constexpr double kTolF32 = 1e-4;

struct Row {
  std::string name;
  double err;
  double tol;
  bool pass() const { return std::isfinite(err) && err <= tol; }
};

double rel_l2(const std::vector<float>& a, const std::vector<double>& b) {
  DIT_CHECK(a.size() == b.size(), "comparison of ", a.size(), " values with ", b.size());
  double d2 = 0, r2 = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    d2 += d * d;
    r2 += b[i] * b[i];
  }
  return r2 > 0 ? std::sqrt(d2 / r2) : std::sqrt(d2);
}

Tensor host_view(std::vector<float>& v, Shape s) { return Tensor{v.data(), DType::F32, s, Device::Host}; }

// Copies a host tensor to a fresh allocation of the backend's compute dtype.
Tensor to_device(Backend& be, Arena& arena, const Tensor& host) {
  Tensor t = arena.tensor(host.shape, host.dtype == DType::I32 ? DType::I32 : be.compute_dtype());
  be.copy(t, host);
  return t;
}

std::vector<float> to_host(Backend& be, const Tensor& t) {
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  be.copy(host_view(v, t.shape), t);
  return v;
}

// The forward group: model output, input gradient and every parameter gradient of sum(out * R).
void verify_forward(Backend& be, const GoldenFile& g, std::vector<Row>& rows) {
  const DiTConfig& cfg = g.config();
  SelfComm self;
  DiTStage model(be, cfg, StageLayout::whole(cfg), self);
  ParamSet& ps = model.params();
  g.load_params(ps, "/weights");

  // Every tensor the file calls trainable must be one of ours, and the reverse.
  const auto trainable = g.h5().attr_strings("/", "trainable");
  DIT_CHECK(trainable.size() == ps.size(), g.path(), ": lists ", trainable.size(),
            " trainable tensors, the model built from its config has ", ps.size());
  for (const auto& name : trainable)
    DIT_CHECK(ps.index(name) >= 0, g.path(), ": trainable tensor '", name, "' is not in the model");

  const std::int64_t tokens = cfg.num_patches(), d = cfg.hidden_size;
  rows.push_back({"forward/pos_embed",
                  rel_l2(to_host(be, model.embedders()->pos_embed()),
                         g.read("/weights/pos_embed", {1, tokens, d})),
                  kTolF32});

  const Shape xs = g.h5().shape("/forward/x");
  const std::int64_t n = xs[0];
  const Shape in_shape{n, cfg.in_channels, cfg.input_size, cfg.input_size};
  const Shape out_shape{n, cfg.out_channels(), cfg.input_size, cfg.input_size};
  auto x = g.read_f32("/forward/x", in_shape);
  auto t = g.read_f32("/forward/t", {n});
  auto y = g.read_labels("/forward/y", n);
  auto cot = g.read_f32("/forward/cotangent", out_shape);

  Arena saved(be), scratch(be);
  StageInputs in;
  in.images = to_device(be, saved, host_view(x, in_shape));
  in.t = to_device(be, saved, host_view(t, {n}));
  in.ids = to_device(be, saved, Tensor{y.data(), DType::I32, {n}, Device::Host});
  StageActs acts = model.forward(in, saved, scratch);
  rows.push_back({"forward/out", rel_l2(to_host(be, acts.final.out), g.read("/forward/out", out_shape)),
                  kTolF32});

  ps.zero_grads();
  StageGrads grads;
  grads.dout = to_device(be, saved, host_view(cot, out_shape));
  grads.dimages = saved.tensor(in_shape, be.compute_dtype());
  model.backward(acts, grads, scratch);
  rows.push_back({"forward/dx", rel_l2(to_host(be, grads.dimages), g.read("/forward/dx", in_shape)),
                  kTolF32});
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const ParamSpec& s = ps.specs()[i];
    rows.push_back({"forward/grads/" + s.name,
                    rel_l2(ps.grad_host(static_cast<int>(i)),
                           g.read("/forward/grads/" + s.name, s.global)),
                    kTolF32});
  }
}

}  // namespace

const std::vector<std::string>& verify_group_names() {
  static const std::vector<std::string> names = {"forward"};
  return names;
}

int run_verify(const VerifyOptions& opt) {
  GoldenFile golden(opt.golden);
  std::vector<std::string> groups = opt.groups;
  if (groups.empty())
    for (const auto& name : verify_group_names())
      if (golden.has_group(name)) groups.push_back(name);
  for (const auto& name : groups) {
    bool known = false;
    for (const auto& k : verify_group_names()) known |= k == name;
    DIT_CHECK(known, "unknown verify group '", name, "'");
    DIT_CHECK(golden.has_group(name), golden.path(), ": group /", name, " is missing");
  }
  auto be = make_backend(opt.backend);
  std::vector<Row> rows;
  for (const auto& name : groups)
    if (name == "forward") verify_forward(*be, golden, rows);

  const DiTConfig& c = golden.config();
  std::printf("golden %s: input %d patch %d channels %d hidden %d depth %d heads %d classes %d "
              "learn_sigma %s; backend %s\n",
              golden.path().c_str(), c.input_size, c.patch_size, c.in_channels, c.hidden_size,
              c.depth, c.num_heads, c.num_classes, c.learn_sigma ? "true" : "false",
              be->name().c_str());
  std::printf("%-56s %12s %10s  %s\n", "tensor", "rel_l2", "tol", "result");
  int failed = 0;
  double worst = 0;
  for (const Row& r : rows) {
    std::printf("%-56s %12.3e %10.1e  %s\n", r.name.c_str(), r.err, r.tol, r.pass() ? "PASS" : "FAIL");
    failed += !r.pass();
    worst = std::max(worst, r.err);
  }
  std::printf("%zu passed, %d failed (worst relative error %.3e)\n", rows.size() - failed, failed, worst);
  return failed == 0 ? 0 : 1;
}

}  // namespace dit
