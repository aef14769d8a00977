// Learned depth pruning's gates (see layer_gates.h).
#include "engine/layer_gates.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.h"
#include "core/philox.h"

namespace dit {

namespace {

// Every choice of `keep` of `size` offsets, in lexicographic order (itertools.combinations').
std::vector<std::vector<int>> combinations(int size, int keep) {
  std::vector<std::vector<int>> out;
  std::vector<int> c(static_cast<std::size_t>(keep));
  for (int i = 0; i < keep; ++i) c[i] = i;
  while (true) {
    out.push_back(c);
    int i = keep - 1;
    while (i >= 0 && c[i] == size - keep + i) --i;
    if (i < 0) return out;
    ++c[i];
    for (int j = i + 1; j < keep; ++j) c[j] = c[j - 1] + 1;
  }
}

// C(size, keep), or more than kMaxGateChoices (without enumerating them).
std::size_t choice_count(int size, int keep) {
  double c = 1;
  for (int i = 1; i <= keep; ++i) c = c * (size - keep + i) / i;
  return c > double(kMaxGateChoices) ? kMaxGateChoices + 1 : static_cast<std::size_t>(std::llround(c));
}

std::size_t argmax(const std::vector<double>& v) {
  return static_cast<std::size_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

std::vector<double> softmax(const std::vector<double>& z) {
  const double top = *std::max_element(z.begin(), z.end());
  std::vector<double> p(z.size());
  double sum = 0;
  for (std::size_t i = 0; i < z.size(); ++i) sum += p[i] = std::exp(z[i] - top);
  for (double& x : p) x /= sum;
  return p;
}

}  // namespace

std::vector<GateGroup> gate_groups(const std::vector<GroupSize>& sizes, int teacher_depth, int depth) {
  // Invariants: io/prune_text.h checked the --groups text against both depths.
  std::vector<GateGroup> groups;
  int first = 0, kept = 0;
  for (const GroupSize& g : sizes) {
    DIT_CHECK(g.size >= 1 && g.keep >= 1 && g.keep <= g.size, "a gate group keeping ", g.keep, " of ", g.size,
              " blocks");
    DIT_CHECK(choice_count(g.size, g.keep) <= kMaxGateChoices, "a gate group of ", g.size, " keeping ", g.keep,
              " has more than ", kMaxGateChoices, " choices");
    groups.push_back({first, g.size, g.keep});
    first += g.size;
    kept += g.keep;
  }
  DIT_CHECK(!groups.empty() && first == teacher_depth && kept == depth, "gate groups covering ", first,
            " blocks and keeping ", kept, " for a teacher of depth ", teacher_depth, " pruned to ", depth);
  return groups;
}

std::vector<GateGroup> default_gate_groups(int teacher_depth, int depth) {
  if (depth < 1 || teacher_depth % depth != 0) return {};
  const int r = teacher_depth / depth;
  const int m = teacher_depth % (2 * r) == 0 ? 2 * r : r, n = m / r;
  std::vector<GateGroup> out;
  for (int first = 0; first < teacher_depth; first += m) out.push_back({first, m, n});
  return out;
}

std::string groups_text(const std::vector<GateGroup>& groups) {
  std::string s;
  for (const GateGroup& g : groups) s += (s.empty() ? "" : ",") + std::to_string(g.size) + ":" + std::to_string(g.keep);
  return s;
}

double GateSettings::tau_at(std::int64_t step, std::int64_t steps) const {
  return tau_start + (tau_end - tau_start) * double(step) / double(std::max<std::int64_t>(steps - 1, 1));
}

double GateSettings::scaling_at(std::int64_t step, std::int64_t steps) const {
  return scaling_start + (scaling_end - scaling_start) * double(step) / double(std::max<std::int64_t>(steps - 1, 1));
}

LayerGates::LayerGates(const GateSettings& s, std::uint64_t seed) : s_(s), seed_(seed) {
  DIT_CHECK(s.enabled(), "learned pruning without groups");
  for (const GateGroup& g : s.groups) {
    Group& gr = groups_.emplace_back();
    gr.g = g;
    gr.options = combinations(g.size, g.keep);
    const std::size_t c = gr.options.size();
    gr.logit.assign(c, s.init);
    gr.ema = gr.logit;
    gr.m.assign(c, 0.0);
    gr.v.assign(c, 0.0);
    gr.grad.assign(c, 0.0);
    depth_ = std::max(depth_, g.first + g.size);
  }
}

void LayerGates::begin_step(std::int64_t step, std::int64_t steps) {
  step_ = step;
  steps_ = steps;
  drawn_.clear();
}

void LayerGates::sample(int mb, std::int64_t first, std::int64_t n) {
  DIT_CHECK(step_ >= 0, "layer gates: sample before begin_step");
  if (drawn_.count(mb)) return;
  Drawn& d = drawn_[mb];
  d.n = n;
  d.mask.assign(static_cast<std::size_t>(depth_ * n), 0.f);
  const double tau = s_.tau_at(step_, steps_), scaling = s_.scaling_at(step_, steps_);
  for (const Group& g : groups_) d.soft.emplace_back(g.options.size() * static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    Philox rng(seed_, RngPurpose::Gate, static_cast<std::uint64_t>(step_), static_cast<std::uint64_t>(first + i));
    for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
      const Group& g = groups_[gi];
      std::vector<double> z(g.options.size());
      for (std::size_t c = 0; c < z.size(); ++c) {
        const double u = std::max(rng.uniform_f64(), 0x1p-60);  // (0, 1): the Gumbel noise stays finite
        z[c] = (scaling * g.logit[c] - std::log(-std::log(u))) / tau;
      }
      const std::vector<double> y = softmax(z);
      std::copy(y.begin(), y.end(), d.soft[gi].begin() + static_cast<std::ptrdiff_t>(i * y.size()));
      for (int off : g.options[argmax(y)]) d.mask[static_cast<std::size_t>((g.g.first + off) * n + i)] = 1.f;
    }
  }
}

const float* LayerGates::mask(int mb, int block) const {
  auto it = drawn_.find(mb);
  DIT_CHECK(it != drawn_.end() && block >= 0 && block < depth_, "layer gates: no masks of microbatch ", mb,
            " block ", block);
  return it->second.mask.data() + static_cast<std::size_t>(block) * it->second.n;
}

void LayerGates::backward(int mb, const float* dm, double weight) {
  auto it = drawn_.find(mb);
  DIT_CHECK(it != drawn_.end(), "layer gates: backward of microbatch ", mb, " without its masks");
  const Drawn& d = it->second;
  const double k = weight * s_.scaling_at(step_, steps_) / s_.tau_at(step_, steps_);
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    Group& g = groups_[gi];
    const std::size_t c = g.options.size();
    std::vector<double> dy(c);
    for (std::int64_t i = 0; i < d.n; ++i) {
      const double* y = d.soft[gi].data() + i * c;
      double mean = 0;
      for (std::size_t o = 0; o < c; ++o) {
        dy[o] = 0;
        for (int off : g.options[o]) dy[o] += dm[static_cast<std::size_t>((g.g.first + off) * d.n + i)];
        mean += y[o] * dy[o];
      }
      for (std::size_t o = 0; o < c; ++o) g.grad[o] += k * y[o] * (dy[o] - mean);
    }
  }
}

void LayerGates::update(Comm& world, double divisor) {
  std::vector<double> all;
  for (const Group& g : groups_) all.insert(all.end(), g.grad.begin(), g.grad.end());
  world.all_reduce_sum(all.data(), static_cast<int>(all.size()));
  ++t_;
  const double bc1 = 1.0 - std::pow(s_.beta1, double(t_)), bc2 = 1.0 - std::pow(s_.beta2, double(t_));
  std::size_t at = 0;
  for (Group& g : groups_)
    for (std::size_t o = 0; o < g.logit.size(); ++o, ++at) {
      const double grad = all[at] / divisor;
      g.m[o] = s_.beta1 * g.m[o] + (1 - s_.beta1) * grad;
      g.v[o] = s_.beta2 * g.v[o] + (1 - s_.beta2) * grad * grad;
      g.logit[o] -= s_.lr * (g.m[o] / bc1) / (std::sqrt(g.v[o] / bc2) + s_.eps);
      g.ema[o] = s_.ema_decay * g.ema[o] + (1 - s_.ema_decay) * g.logit[o];
      g.grad[o] = 0;
    }
}

std::vector<int> LayerGates::decision() const {
  std::vector<int> keep;
  for (const Group& g : groups_)
    for (int off : g.options[argmax(g.ema)]) keep.push_back(g.g.first + off);
  return keep;
}

std::vector<double> LayerGates::confidence() const {
  std::vector<double> out;
  const double scaling = s_.scaling_at(std::max<std::int64_t>(step_, 0), steps_);
  for (const Group& g : groups_) {
    std::vector<double> z(g.ema.size());
    for (std::size_t o = 0; o < z.size(); ++o) z[o] = scaling * g.ema[o];
    const std::vector<double> p = softmax(z);
    out.push_back(p[argmax(g.ema)]);
  }
  return out;
}

std::vector<double> LayerGates::logits() const {
  std::vector<double> out;
  for (const Group& g : groups_) out.insert(out.end(), g.logit.begin(), g.logit.end());
  return out;
}

std::vector<double> LayerGates::gradient() const {
  std::vector<double> out;
  for (const Group& g : groups_) out.insert(out.end(), g.grad.begin(), g.grad.end());
  return out;
}

std::vector<double> LayerGates::ema_logits() const {
  std::vector<double> out;
  for (const Group& g : groups_) out.insert(out.end(), g.ema.begin(), g.ema.end());
  return out;
}

}  // namespace dit
