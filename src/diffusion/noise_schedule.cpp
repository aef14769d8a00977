// Float64 diffusion schedules and respacing, following the official DiT gaussian_diffusion.py
// and respace.py operation by operation so the arrays agree with numpy to the last few ulps.
#include "diffusion/noise_schedule.h"

#include <cctype>
#include <cmath>
#include <set>
#include <utility>

#include "core/error.h"

namespace dit::diffusion {

double Schedule::fixed_large_variance(std::int64_t t) const {
  check_timestep(t, "timestep");
  return t == 0 ? posterior_variance[1] : betas[static_cast<std::size_t>(t)];
}

void Schedule::check_timestep(std::int64_t t, const char* what) const {
  DIT_CHECK(t >= 0 && t < num_timesteps, what, " ", t,
            " is outside the schedule: expected 0 <= t < ", num_timesteps);
}

std::vector<std::int64_t> Schedule::model_timesteps(std::span<const std::int64_t> t) const {
  std::vector<std::int64_t> out;
  out.reserve(t.size());
  for (std::int64_t ti : t) {
    check_timestep(ti, "timestep");
    out.push_back(timestep_map[static_cast<std::size_t>(ti)]);
  }
  return out;
}

std::vector<double> linear_betas(int num_timesteps) {
  DIT_CHECK(num_timesteps >= 2, "a linear beta schedule needs at least 2 timesteps, got ", num_timesteps);
  const double scale = 1000.0 / num_timesteps;
  const double start = scale * 0.0001, stop = scale * 0.02;
  // numpy.linspace: y_i = i * ((stop - start) / (T - 1)) + start, the last point set to stop.
  const double step = (stop - start) / (num_timesteps - 1);
  std::vector<double> betas(static_cast<std::size_t>(num_timesteps));
  for (int i = 0; i < num_timesteps; ++i) betas[static_cast<std::size_t>(i)] = i * step + start;
  betas.back() = stop;
  return betas;
}

Schedule make_schedule(std::vector<double> betas, VarianceKind variance,
                       std::vector<std::int64_t> timestep_map) {
  const std::size_t T = betas.size();
  DIT_CHECK(T >= 2, "a diffusion schedule needs at least 2 timesteps, got ", T);
  for (std::size_t i = 0; i < T; ++i)
    DIT_CHECK(betas[i] > 0.0 && betas[i] <= 1.0, "betas[", i, "] = ", betas[i],
              ": expected 0 < beta <= 1");
  if (timestep_map.empty())
    for (std::size_t i = 0; i < T; ++i) timestep_map.push_back(static_cast<std::int64_t>(i));
  DIT_CHECK(timestep_map.size() == T, "timestep_map has ", timestep_map.size(),
            " entries, expected one per beta (", T, ")");

  Schedule s;
  s.num_timesteps = static_cast<int>(T);
  s.variance = variance;
  s.timestep_map = std::move(timestep_map);
  auto arr = [T] { return std::vector<double>(T); };
  s.alphas_cumprod = arr();
  double prod = 1.0;
  for (std::size_t i = 0; i < T; ++i) s.alphas_cumprod[i] = prod *= (1.0 - betas[i]);

  s.alphas_cumprod_prev = arr();
  s.alphas_cumprod_next = arr();
  s.sqrt_alphas_cumprod = arr();
  s.sqrt_one_minus_alphas_cumprod = arr();
  s.log_one_minus_alphas_cumprod = arr();
  s.sqrt_recip_alphas_cumprod = arr();
  s.sqrt_recipm1_alphas_cumprod = arr();
  s.posterior_variance = arr();
  s.posterior_mean_coef1 = arr();
  s.posterior_mean_coef2 = arr();
  for (std::size_t i = 0; i < T; ++i) {
    const double a = s.alphas_cumprod[i];
    const double prev = i == 0 ? 1.0 : s.alphas_cumprod[i - 1];
    s.alphas_cumprod_prev[i] = prev;
    s.alphas_cumprod_next[i] = i + 1 < T ? s.alphas_cumprod[i + 1] : 0.0;
    s.sqrt_alphas_cumprod[i] = std::sqrt(a);
    s.sqrt_one_minus_alphas_cumprod[i] = std::sqrt(1.0 - a);
    s.log_one_minus_alphas_cumprod[i] = std::log(1.0 - a);
    s.sqrt_recip_alphas_cumprod[i] = std::sqrt(1.0 / a);
    s.sqrt_recipm1_alphas_cumprod[i] = std::sqrt(1.0 / a - 1.0);
    s.posterior_variance[i] = betas[i] * (1.0 - prev) / (1.0 - a);
    s.posterior_mean_coef1[i] = betas[i] * std::sqrt(prev) / (1.0 - a);
    s.posterior_mean_coef2[i] = (1.0 - prev) * std::sqrt(1.0 - betas[i]) / (1.0 - a);
  }
  // The posterior variance is 0 at t = 0; its log is clipped by reusing the value at t = 1.
  s.posterior_log_variance_clipped = arr();
  for (std::size_t i = 0; i < T; ++i)
    s.posterior_log_variance_clipped[i] = std::log(s.posterior_variance[i == 0 ? 1 : i]);
  s.betas = std::move(betas);
  return s;
}

namespace {

// Python's int() on one section: optional blanks around an optional sign and decimal digits.
int parse_count(const std::string& text, const std::string& whole) {
  std::size_t b = 0, e = text.size();
  while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
  std::size_t d = b;
  if (d < e && (text[d] == '+' || text[d] == '-')) ++d;
  bool ok = d < e && e - d <= 9;
  for (std::size_t i = d; ok && i < e; ++i) ok = std::isdigit(static_cast<unsigned char>(text[i]));
  DIT_CHECK(ok, "timestep respacing \"", whole, "\": \"", text,
            "\" is not a step count; expected \"ddimN\" or comma-separated integers like \"250\" "
            "or \"10,15,20\"");
  const int v = std::stoi(text.substr(b, e - b));
  DIT_CHECK(v >= 1, "timestep respacing \"", whole, "\": step count ", v, " must be at least 1");
  return v;
}

}  // namespace

std::vector<int> space_timesteps(int num_timesteps, const std::string& section_counts) {
  // "ddimN" holds one count; otherwise comma-separated counts, one per section.
  const bool ddim = section_counts.rfind("ddim", 0) == 0;
  const std::string body = ddim ? section_counts.substr(4) : section_counts;
  std::vector<int> counts;
  std::size_t begin = 0;
  while (true) {
    const std::size_t comma = ddim ? std::string::npos : body.find(',', begin);
    counts.push_back(parse_count(body.substr(begin, comma - begin), section_counts));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  if (ddim) {  // the smallest integer stride whose range(0, T, stride) has exactly N elements
    for (int stride = 1; stride < num_timesteps; ++stride) {
      if ((num_timesteps + stride - 1) / stride != counts[0]) continue;
      std::vector<int> steps;
      for (int t = 0; t < num_timesteps; t += stride) steps.push_back(t);
      return steps;
    }
    DIT_FAIL("timestep respacing \"", section_counts, "\": cannot take exactly ", counts[0], " steps of ",
             num_timesteps, " with an integer stride");
  }
  DIT_CHECK(num_timesteps >= 1, "respacing needs a positive number of timesteps, got ", num_timesteps);
  const int k = static_cast<int>(counts.size());
  const int size_per = num_timesteps / k, extra = num_timesteps % k;
  std::set<int> steps;
  int start = 0;
  for (int i = 0; i < k; ++i) {
    const int size = size_per + (i < extra ? 1 : 0);
    DIT_CHECK(size >= counts[i], "timestep respacing \"", section_counts,
              "\": cannot divide a section of ", size, " steps into ", counts[i]);
    // Evenly spaced fractional indices, accumulated as Python does and rounded half to even
    // (std::nearbyint under the default rounding mode, like Python's round()).
    const double stride = counts[i] <= 1 ? 1.0 : static_cast<double>(size - 1) / (counts[i] - 1);
    double idx = 0.0;
    for (int j = 0; j < counts[i]; ++j) {
      steps.insert(start + static_cast<int>(std::nearbyint(idx)));
      idx += stride;
    }
    start += size;
  }
  return {steps.begin(), steps.end()};
}

Schedule respace(const Schedule& base, const std::vector<int>& use_timesteps) {
  std::set<int> keep(use_timesteps.begin(), use_timesteps.end());
  for (int t : keep) base.check_timestep(t, "respaced timestep");
  std::vector<double> betas;
  std::vector<std::int64_t> map;
  double last = 1.0;
  for (int t : keep) {
    const double a = base.alphas_cumprod[static_cast<std::size_t>(t)];
    betas.push_back(1.0 - a / last);
    last = a;
    map.push_back(base.timestep_map[static_cast<std::size_t>(t)]);
  }
  return make_schedule(std::move(betas), base.variance, std::move(map));
}

Schedule create_diffusion(const DiffusionOptions& options) {
  const VarianceKind kind =
      options.learn_sigma ? VarianceKind::kLearnedRange : VarianceKind::kFixedLarge;
  Schedule base = make_schedule(linear_betas(options.diffusion_steps), kind);
  const std::string spacing =
      options.respacing.empty() ? std::to_string(options.diffusion_steps) : options.respacing;
  return respace(base, space_timesteps(options.diffusion_steps, spacing));
}

}  // namespace dit::diffusion
