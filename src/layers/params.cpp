// Parameter specs, tp slicing, keyed initialization and the flat parameter/gradient buffers.
#include "layers/params.h"

#include <algorithm>

#include <cmath>

#include "core/philox.h"

namespace dit {

std::uint64_t name_hash(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

Shape ParamSpec::local(int tp) const {
  Shape s = global;
  if (split == Split::Column) {
    DIT_CHECK(s[0] % (groups * tp) == 0, name, ": dim 0 of ", global.str(), " does not split into ",
              groups, " x ", tp, " tensor-parallel parts");
    s.dims[0] /= tp;
  } else if (split == Split::Row) {
    DIT_CHECK(s.rank == 2 && s[1] % tp == 0, name, ": dim 1 of ", global.str(),
              " does not split into ", tp, " tensor-parallel parts");
    s.dims[1] /= tp;
  }
  return s;
}

namespace {
// Calls fn(global_offset, local_offset, count) for each contiguous run of a rank's slice.
template <typename Fn>
void for_each_run(const ParamSpec& p, int tp, int r, Fn fn) {
  const std::int64_t n = p.global.numel();
  if (p.split == Split::Replicated || tp == 1) {
    fn(0, 0, n);
  } else if (p.split == Split::Column) {
    const std::int64_t row = n / p.global[0];
    const std::int64_t group_rows = p.global[0] / p.groups, part = group_rows / tp;
    for (int g = 0; g < p.groups; ++g)
      fn((g * group_rows + r * part) * row, g * part * row, part * row);
  } else {
    const std::int64_t rows = p.global[0], cols = p.global[1], part = cols / tp;
    for (std::int64_t i = 0; i < rows; ++i) fn(i * cols + r * part, i * part, part);
  }
}
}  // namespace

void ParamSpec::slice(const float* g, float* l, int tp, int r) const {
  for_each_run(*this, tp, r, [&](std::int64_t go, std::int64_t lo, std::int64_t n) {
    std::copy(g + go, g + go + n, l + lo);
  });
}

void ParamSpec::unslice(const float* l, float* g, int tp, int r) const {
  for_each_run(*this, tp, r, [&](std::int64_t go, std::int64_t lo, std::int64_t n) {
    std::copy(l + lo, l + lo + n, g + go);
  });
}

void ParamSpec::initialize(std::uint64_t seed, std::vector<float>& g) const {
  g.assign(static_cast<std::size_t>(global.numel()), 0.f);
  Philox rng(seed, RngPurpose::Init, 0, name_hash(name));
  if (init == Init::XavierUniform) {
    // torch.nn.init.xavier_uniform_ on the (out, in...) tensor viewed as (out, prod(in...))
    const double fan_out = static_cast<double>(global[0]);
    const double fan_in = static_cast<double>(global.numel()) / fan_out;
    const float bound = static_cast<float>(std::sqrt(6.0 / (fan_in + fan_out)));
    for (auto& v : g) v = (2.f * rng.uniform() - 1.f) * bound;
  } else if (init == Init::KaimingUniform) {
    const double fan_in = static_cast<double>(global.numel()) / static_cast<double>(global[0]);
    const float bound = static_cast<float>(1.0 / std::sqrt(fan_in));
    for (auto& v : g) v = (2.f * rng.uniform() - 1.f) * bound;
  } else if (init == Init::Normal002) {
    for (auto& v : g) v = 0.02f * rng.normal();
  } else if (init == Init::One) {
    g.assign(g.size(), 1.f);
  }
}

ParamSet::ParamSet(Backend& backend, std::vector<ParamSpec> specs, int tp, int tp_rank,
                   std::int64_t pad_multiple, Gradients gradients)
    : backend_(&backend), specs_(std::move(specs)), tp_(tp), tp_rank_(tp_rank) {
  // Each tensor starts on a multiple of kAlign elements (256 bytes in fp32, 128 in 16 bits), so
  // GEMM libraries may use their aligned, vectorized kernels on every weight; the gaps stay zero.
  constexpr std::int64_t kAlign = 64;
  for (auto& s : specs_) {
    total_ = (total_ + kAlign - 1) / kAlign * kAlign;
    offsets_.push_back(total_);
    total_ += s.local(tp).numel();
  }
  DIT_CHECK(pad_multiple > 0, "parameter padding multiple must be positive");
  padded_ = (total_ + pad_multiple - 1) / pad_multiple * pad_multiple;
  values_ = Buffer(backend, static_cast<std::size_t>(padded_) * dtype_size(backend.compute_dtype()));
  if (gradients == Gradients::Kept) grads_ = Buffer(backend, static_cast<std::size_t>(padded_) * dtype_size(kGradDType));
  zero_untouched(backend, flat_values());
  if (grads_.bytes() > 0) zero_untouched(backend, flat_grads());
}

// Zeros a flat buffer: the whole pages the allocator can hand back are zeroed that way, untouched,
// the rest filled, so a buffer ZeRO-3 shards is never resident all at once.
void zero_untouched(Backend& be, const Tensor& flat) {
  const std::size_t page = be.page_bytes(), es = dtype_size(flat.dtype);
  const auto a = reinterpret_cast<std::uintptr_t>(flat.data);
  const std::uintptr_t first = (a + page - 1) / page * page, end = (a + flat.bytes()) / page * page;
  if (end <= first || (first - a) % es != 0 || !be.release_pages(reinterpret_cast<void*>(first), end - first)) {
    be.fill(flat, 0.f);
    return;
  }
  const std::int64_t head = static_cast<std::int64_t>((first - a) / es), tail = static_cast<std::int64_t>((end - a) / es);
  if (head > 0) be.fill(flat.rows(0, head), 0.f);
  if (tail < flat.numel()) be.fill(flat.rows(tail, flat.numel() - tail), 0.f);
}

int ParamSet::index(const std::string& name) const {
  for (std::size_t i = 0; i < specs_.size(); ++i)
    if (specs_[i].name == name) return static_cast<int>(i);
  return -1;
}

int ParamSet::checked_index(const std::string& name) const {
  int i = index(name);
  DIT_CHECK(i >= 0, "no parameter named '", name, "' in this model slice");
  return i;
}

Tensor ParamSet::value(int i) const {
  const DType dt = backend_->compute_dtype();
  return values_.tensor(specs_[i].local(tp_), dt, offsets_[i] * dtype_size(dt));
}
Tensor ParamSet::grad(int i) const {
  if (grads_.bytes() == 0 && padded_ > 0)  // forward only: no gradient (a null view; a backward would fail on it)
    return Tensor{nullptr, kGradDType, specs_[i].local(tp_), backend_->device()};
  return grads_.tensor(specs_[i].local(tp_), kGradDType, offsets_[i] * dtype_size(kGradDType));
}
Tensor ParamSet::flat_values() const { return values_.tensor({padded_}, backend_->compute_dtype()); }
Tensor ParamSet::flat_grads() const {
  DIT_CHECK(grads_.bytes() > 0 || padded_ == 0, "a forward-only model has no gradients");
  return grads_.tensor({padded_}, kGradDType);
}

void ParamSet::zero_grads() {
  if (grads_.bytes() > 0) backend_->fill(flat_grads(), 0.f);
}

void ParamSet::initialize(std::uint64_t seed, std::int64_t keep_begin, std::int64_t keep_end) {
  if (backend_->device() == Device::Virtual) return;  // the planner's buffers hold no values
  if (keep_end < 0) keep_end = padded_;
  std::vector<float> g;
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    const std::int64_t o = offsets_[i], n = specs_[i].local(tp_).numel();
    const std::int64_t a = std::max(o, keep_begin), b = std::min(o + n, keep_end);
    if (a >= b) continue;  // each tensor's draw is keyed by its name: skipping one changes no other
    specs_[i].initialize(seed, g);
    const std::vector<float> l = local_host(static_cast<int>(i), g);
    backend_->copy(flat_values().rows(a, b - a),
                   Tensor{const_cast<float*>(l.data()) + (a - o), DType::F32, {b - a}, Device::Host});
  }
}

std::vector<float> ParamSet::local_host(int i, const std::vector<float>& g) const {
  const ParamSpec& s = specs_[i];
  DIT_CHECK(static_cast<std::int64_t>(g.size()) == s.global.numel(), s.name, ": expected ",
            s.global.numel(), " values for shape ", s.global.str(), ", got ", g.size());
  std::vector<float> l(static_cast<std::size_t>(s.local(tp_).numel()));
  s.slice(g.data(), l.data(), tp_, tp_rank_);
  return l;
}

void ParamSet::set_global(int i, const std::vector<float>& g) {
  std::vector<float> l = local_host(i, g);
  Tensor host{l.data(), DType::F32, specs_[i].local(tp_), Device::Host};
  backend_->copy(value(i), host);
}

std::vector<float> ParamSet::grad_host(int i) const {
  Tensor v = grad(i);
  std::vector<float> out(static_cast<std::size_t>(v.numel()));
  backend_->copy(Tensor{out.data(), DType::F32, v.shape, Device::Host}, v);
  return out;
}

}  // namespace dit
