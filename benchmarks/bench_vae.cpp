// bench_vae: images/s and GFLOP/s of the KL autoencoder (layers/vae.h, Stable Diffusion's kl-f8 by
// default) on a backend (a benchmark, not a test): encode of (N, 3, S, S) images in [-1, 1] and
// decode of (N, 4, S/8, S/8) latents, random weights from a fixed seed (convolution and linear
// weights and biases normal * 0.02, GroupNorm weight 1 and bias 0), warm-up calls left out, the
// median of the timed calls reported. benchmarks/vae_torch.py times diffusers' AutoencoderKL the
// same way; benchmarks/vae.sh runs both side by side.
//   bench_vae --backend cpu --threads 2 --batch 1 --size 256 --iters 3 --warmup 1 --json vae.json
//   bench_vae --layers        # also time every distinct convolution of the passes on its own
// FLOPs are 2 x the multiply-adds of every convolution (N K Ho Wo C kh kw) and of the mid-block
// attentions' four projections and two products (Q K^T, P V), counted from the configuration by
// the walk below, which follows layers/vae.cpp; GroupNorm, SiLU, softmax, upsampling and the
// residual additions are not counted. kl-f8 at 256 x 256: 136.4 GMAC to encode, 311.1 to decode.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "core/arena.h"
#include "core/clock.h"
#include "core/philox.h"
#include "layers/vae.h"
#include "bench_timing.h"

namespace {

using namespace dit;
using bench::median_s;

// One convolution of a pass, per image.
struct ConvOp {
  std::int64_t c, h, w, k, kh, kw;
  ConvGeometry g;
  std::int64_t oh() const { return (h + g.pad_top + g.pad_bottom - kh) / g.stride_h + 1; }
  std::int64_t ow() const { return (w + g.pad_left + g.pad_right - kw) / g.stride_w + 1; }
  double macs() const { return double(k) * double(oh()) * double(ow()) * double(c) * double(kh * kw); }
  auto key() const {
    return std::make_tuple(c, h, w, k, kh, kw, g.stride_h, g.stride_w, g.pad_top, g.pad_bottom, g.pad_left,
                           g.pad_right);
  }
};

// The multiply-adds of one pass for one image: its convolutions and its attentions' matmuls.
struct PassWork {
  std::vector<ConvOp> convs;
  double attention_macs = 0;
  double conv_macs() const {
    double m = 0;
    for (const ConvOp& op : convs) m += op.macs();
    return m;
  }
  double macs() const { return conv_macs() + attention_macs; }
};

// Walks the architecture as layers/vae.cpp runs it (vae.h describes it).
class Walk {
 public:
  explicit Walk(const VaeConfig& c) : c_(c) {}

  PassWork encode(std::int64_t h, std::int64_t w) {
    PassWork p;
    const auto& ch = c_.block_out_channels;
    conv(p, c_.in_channels, h, w, ch[0], 3, ConvGeometry::same(1));
    std::int64_t cin = ch[0];
    for (std::size_t i = 0; i < ch.size(); ++i) {
      for (int j = 0; j < c_.layers_per_block; ++j) {
        resnet(p, cin, ch[i], h, w);
        cin = ch[i];
      }
      if (i + 1 < ch.size()) {
        conv(p, cin, h, w, cin, 3, ConvGeometry{2, 2, 0, 1, 0, 1});
        h /= 2;
        w /= 2;
      }
    }
    mid(p, cin, h, w);
    conv(p, cin, h, w, 2 * c_.latent_channels, 3, ConvGeometry::same(1));
    if (c_.use_quant_conv) conv(p, 2 * c_.latent_channels, h, w, 2 * c_.latent_channels, 1, ConvGeometry::same(0));
    return p;
  }

  PassWork decode(std::int64_t h, std::int64_t w) {
    PassWork p;
    const auto& ch = c_.block_out_channels;
    if (c_.use_post_quant_conv) conv(p, c_.latent_channels, h, w, c_.latent_channels, 1, ConvGeometry::same(0));
    std::int64_t cin = ch.back();
    conv(p, c_.latent_channels, h, w, cin, 3, ConvGeometry::same(1));
    mid(p, cin, h, w);
    for (std::size_t i = 0; i < ch.size(); ++i) {
      const std::int64_t out = ch[ch.size() - 1 - i];
      for (int j = 0; j <= c_.layers_per_block; ++j) {
        resnet(p, cin, out, h, w);
        cin = out;
      }
      if (i + 1 < ch.size()) {
        h *= 2;
        w *= 2;
        conv(p, cin, h, w, cin, 3, ConvGeometry::same(1));
      }
    }
    conv(p, cin, h, w, c_.out_channels, 3, ConvGeometry::same(1));
    return p;
  }

 private:
  static void conv(PassWork& p, std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t k, std::int64_t ks,
                   ConvGeometry g) {
    p.convs.push_back(ConvOp{c, h, w, k, ks, ks, g});
  }
  static void resnet(PassWork& p, std::int64_t cin, std::int64_t cout, std::int64_t h, std::int64_t w) {
    conv(p, cin, h, w, cout, 3, ConvGeometry::same(1));
    conv(p, cout, h, w, cout, 3, ConvGeometry::same(1));
    if (cin != cout) conv(p, cin, h, w, cout, 1, ConvGeometry::same(0));
  }
  void mid(PassWork& p, std::int64_t c, std::int64_t h, std::int64_t w) const {
    resnet(p, c, c, h, w);
    if (c_.mid_block_attention) {
      // to_q, to_k, to_v and to_out (T C C each), Q K^T and P V (T T C each), T = H W, one head.
      const double t = double(h) * double(w), cc = double(c);
      p.attention_macs += 4.0 * t * cc * cc + 2.0 * t * t * cc;
    }
    resnet(p, c, c, h, w);
  }
  VaeConfig c_;
};

// Seeded weights: Philox streams named by the parameter's index in vae_parameters' order.
VaeWeightSource random_weights(std::uint64_t seed, const VaeConfig& cfg) {
  auto index = std::make_shared<std::map<std::string, std::uint64_t>>();
  const std::vector<VaeParam> list = vae_parameters(cfg);
  for (std::size_t i = 0; i < list.size(); ++i) (*index)[list[i].name] = i;
  return [seed, index](const VaeParam& p) {
    std::vector<float> v(static_cast<std::size_t>(p.numel()));
    const bool is_norm = p.name.find("norm") != std::string::npos;  // norm1/2, group_norm, conv_norm_out
    const bool is_weight = p.name.size() > 7 && p.name.compare(p.name.size() - 7, 7, ".weight") == 0;
    if (is_norm) {
      std::fill(v.begin(), v.end(), is_weight ? 1.f : 0.f);
    } else {
      // One stream per block of 64Ki values (step = the block), so blocks fill in parallel.
      const std::int64_t blocks = (p.numel() + 65535) / 65536, id = static_cast<std::int64_t>(index->at(p.name));
#pragma omp parallel for schedule(static)
      for (std::int64_t b = 0; b < blocks; ++b) {
        Philox rng(seed, RngPurpose::Test, static_cast<std::uint64_t>(b), static_cast<std::uint64_t>(id));
        const std::int64_t end = std::min(p.numel(), (b + 1) * 65536);
        for (std::int64_t i = b * 65536; i < end; ++i) v[static_cast<std::size_t>(i)] = 0.02f * rng.normal();
      }
    }
    return v;
  };
}

struct Result {
  double seconds = 0, images_s = 0, gflop_s = 0;
  std::vector<double> all;
};

// Every distinct convolution of a pass timed on its own (one image), with the pass's count of it.
void time_layers(Backend& be, const char* pass, const PassWork& work, std::int64_t n, int warm, int reps,
                 double pass_s) {
  std::map<decltype(ConvOp{}.key()), std::pair<ConvOp, int>> distinct;
  for (const ConvOp& op : work.convs) {
    auto it = distinct.find(op.key());
    if (it == distinct.end()) distinct.emplace(op.key(), std::make_pair(op, 1));
    else ++it->second.second;
  }
  std::printf("  %s: every distinct convolution on its own, batch %lld (ms per call, GFLOP/s, count, share of the pass)\n",
              pass, (long long)n);
  double sum = 0;
  Arena arena(be);
  const DType dt = be.compute_dtype();
  for (const auto& [key, entry] : distinct) {
    const ConvOp& op = entry.first;
    arena.reset();
    Tensor x = arena.tensor({n, op.c, op.h, op.w}, dt), w = arena.tensor({op.k, op.c, op.kh, op.kw}, dt);
    Tensor b = arena.tensor({op.k}, dt), y = arena.tensor({n, op.k, op.oh(), op.ow()}, dt);
    std::vector<float> host(static_cast<std::size_t>(std::max(x.numel(), w.numel())));
    Philox rng(7, RngPurpose::Test, 0, std::uint64_t(1) << 33);  // apart from the weights' streams
    for (auto& v : host) v = rng.normal();
    be.copy(x, Tensor{host.data(), DType::F32, x.shape, Device::Host});
    for (std::size_t i = 0; i < static_cast<std::size_t>(w.numel()); ++i) host[i] *= 0.02f;
    be.copy(w, Tensor{host.data(), DType::F32, w.shape, Device::Host});
    be.copy(b, Tensor{host.data(), DType::F32, b.shape, Device::Host});
    const double s = median_s(be, warm, reps, [&] { be.conv2d_fwd(x, w, b, op.g, y, Accumulate::Overwrite); });
    sum += s * entry.second;
    std::printf("    C %4lld -> K %4lld  %lldx%lld %4lldx%-4lld stride %d pad %d%d%d%d: %9.2f ms %7.1f GFLOP/s x%-2d %5.1f%%\n",
                (long long)op.c, (long long)op.k, (long long)op.kh, (long long)op.kw, (long long)op.h,
                (long long)op.w, op.g.stride_h, op.g.pad_top, op.g.pad_bottom, op.g.pad_left, op.g.pad_right,
                1e3 * s, 2.0 * double(n) * op.macs() / s / 1e9, entry.second, 100.0 * s * entry.second / pass_s);
  }
  std::printf("    convolutions alone: %.1f ms of the pass's %.1f ms (%.1f%%)\n", 1e3 * sum, 1e3 * pass_s,
              100.0 * sum / pass_s);
}

bool all_finite(Backend& be, const Tensor& t) {
  std::vector<float> host(static_cast<std::size_t>(t.numel()));
  be.copy(Tensor{host.data(), DType::F32, t.shape, Device::Host}, t);
  be.synchronize();
  return std::all_of(host.begin(), host.end(), [](float v) { return std::isfinite(v); });
}

}  // namespace

int main(int argc, char** argv) {
  std::string backend = "cpu", json, only = "both";
  std::int64_t n = 1, size = 256;
  int threads = 0, warm = 1, reps = 3;
  std::uint64_t seed = 0;
  bool layers = false;
  CLI::App app{"bench_vae: encode/decode images/s and GFLOP/s of the kl-f8 AutoencoderKL on a backend"};
  app.add_option("--backend", backend, "cpu, cpu:bf16, cuda, cuda:bf16, ...")->capture_default_str();
  app.add_option("--batch", n, "images per call")->capture_default_str();
  app.add_option("--size", size, "image side S (latents S/8)")->capture_default_str();
  app.add_option("--threads", threads, "CPU threads (0: OMP_NUM_THREADS or all cores)")->capture_default_str();
  app.add_option("--iters", reps, "timed calls of each pass (the median is reported)")->capture_default_str();
  app.add_option("--warmup", warm, "untimed calls of each pass first")->capture_default_str();
  app.add_option("--seed", seed, "seed of the weights and inputs")->capture_default_str();
  app.add_option("--only", only, "encode, decode or both")->capture_default_str();
  app.add_flag("--layers", layers, "also time every distinct convolution of the passes on its own");
  app.add_option("--json", json, "write the results here");
  CLI11_PARSE(app, argc, argv);
  try {
    DIT_CHECK(only == "both" || only == "encode" || only == "decode", "--only must be encode, decode or both");
    DIT_CHECK(n > 0 && reps > 0 && warm >= 0, "--batch and --iters must be positive, --warmup not negative");
    std::string why;
    if (!backend_available(backend, &why)) {
      std::fprintf(stderr, "bench_vae: backend %s is not available: %s\n", backend.c_str(), why.c_str());
      return 2;
    }
    if (threads > 0) cpu_set_num_threads(threads);
    auto be = make_backend(backend);
    const VaeConfig cfg;  // kl-f8
    const std::int64_t f = cfg.downsampling();
    DIT_CHECK(size > 0 && size % f == 0, "--size must be a positive multiple of ", f);
    const std::int64_t ls = size / f, lc = cfg.latent_channels;
    Walk walk(cfg);
    const PassWork enc = walk.encode(size, size), dec = walk.decode(ls, ls);
    const double enc_flop = 2.0 * double(n) * enc.macs(), dec_flop = 2.0 * double(n) * dec.macs();

    const double t_build = now_s();
    Vae vae(*be, cfg, random_weights(seed, cfg));
    be->synchronize();
    std::printf("bench_vae %s: %s, %.1f M parameters (built in %.1f s); batch %lld, images %lldx%lld, latents %lldx%lldx%lld, threads %d\n",
                backend.c_str(), cfg.describe().c_str(), double(vae.parameter_count()) / 1e6, now_s() - t_build,
                (long long)n, (long long)size, (long long)size, (long long)lc, (long long)ls, (long long)ls,
                threads > 0 ? threads : omp_get_max_threads());
    std::printf("  work per image: encode %.2f GMAC (convolutions %.2f, attention %.2f) = %.2f GFLOP; decode %.2f GMAC "
                "(convolutions %.2f, attention %.2f) = %.2f GFLOP\n",
                enc.macs() / 1e9, enc.conv_macs() / 1e9, enc.attention_macs / 1e9, 2.0 * enc.macs() / 1e9,
                dec.macs() / 1e9, dec.conv_macs() / 1e9, dec.attention_macs / 1e9, 2.0 * dec.macs() / 1e9);

    Arena arena(*be);
    const DType dt = be->compute_dtype();
    Tensor images = arena.tensor({n, cfg.in_channels, size, size}, dt);
    Tensor moments = arena.tensor({n, 2 * lc, ls, ls}, dt);
    Tensor latents = arena.tensor({n, lc, ls, ls}, dt);
    Tensor decoded = arena.tensor({n, cfg.out_channels, size, size}, dt);
    {
      Philox rng(seed, RngPurpose::Test, 0, std::uint64_t(1) << 32);  // apart from the weights' streams
      std::vector<float> host(static_cast<std::size_t>(images.numel()));
      for (auto& v : host) v = 2.f * rng.uniform() - 1.f;
      be->copy(images, Tensor{host.data(), DType::F32, images.shape, Device::Host});
      host.resize(static_cast<std::size_t>(latents.numel()));
      for (auto& v : host) v = rng.normal();
      be->copy(latents, Tensor{host.data(), DType::F32, latents.shape, Device::Host});
    }
    Result re, rd;
    bool finite = true;
    // One pass timed: its median, images/s and GFLOP/s, printed with every call's time.
    auto time_pass = [&](const char* name, auto&& call, double flop, const Tensor& out, Result& r) {
      r.seconds = median_s(*be, warm, reps, call, &r.all);
      r.images_s = double(n) / r.seconds;
      r.gflop_s = flop / r.seconds / 1e9;
      finite = finite && all_finite(*be, out);
      std::printf("  %s: %9.1f ms  %8.4f images/s  %7.1f GFLOP/s  (calls:", name, 1e3 * r.seconds, r.images_s,
                  r.gflop_s);
      for (double s : r.all) std::printf(" %.1f", 1e3 * s);
      std::printf(" ms)\n");
    };
    if (only != "decode") time_pass("encode", [&] { vae.encode(images, moments); }, enc_flop, moments, re);
    if (only != "encode") time_pass("decode", [&] { vae.decode(latents, decoded); }, dec_flop, decoded, rd);
    if (!finite) std::printf("  WARNING: non-finite values in the outputs\n");
    if (layers) {
      if (only != "decode") time_layers(*be, "encode", enc, n, warm, reps, re.seconds);
      if (only != "encode") time_layers(*be, "decode", dec, n, warm, reps, rd.seconds);
    }
    if (!json.empty()) {
      std::ofstream out(json);
      out.precision(10);
      out << "{\"side\": \"dit_mp\", \"backend\": \"" << backend << "\", \"batch\": " << n << ", \"size\": " << size
          << ", \"threads\": " << (threads > 0 ? threads : omp_get_max_threads())
          << ", \"encode_gmac_per_image\": " << enc.macs() / 1e9 << ", \"decode_gmac_per_image\": " << dec.macs() / 1e9
          << ", \"encode_s\": " << re.seconds << ", \"encode_images_s\": " << re.images_s
          << ", \"encode_gflop_s\": " << re.gflop_s << ", \"decode_s\": " << rd.seconds
          << ", \"decode_images_s\": " << rd.images_s << ", \"decode_gflop_s\": " << rd.gflop_s
          << ", \"finite\": " << (finite ? "true" : "false") << "}\n";
    }
    return finite ? 0 : 3;
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "bench_vae: error: %s\n", ex.what());
    return 1;
  }
}
