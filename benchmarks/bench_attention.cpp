// bench_attention: TFLOP/s of the backend's attention forward and backward (a benchmark, not a
// test) at DiT shapes, on any backend: on CUDA in bf16 it times the path training takes (cuDNN's
// fused SDPA where it serves, else the composed attention; DIT_ATTENTION picks another), and
// prints which one served. FLOPs: forward 4 N H T^2 E (Q K^T and P V), backward
// 2.5 x that (the FlashAttention convention: five products, one of them recomputed).
//   bench_attention --backend cuda:bf16 --batch 32 --tokens 256 --heads 16 --head-dim 72 --json a.json
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "core/philox.h"
#include "bench_timing.h"

namespace {

using namespace dit;
using bench::median_s;

// The process's peak resident memory (VmHWM) in MiB, 0 where /proc is absent.
double peak_rss_mib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string backend = "cpu", json;
  std::int64_t n = 4, t = 64, h = 4, e = 64;
  int warm = 3, reps = 10;
  CLI::App app{"bench_attention: fused attention forward/backward TFLOP/s on a backend"};
  app.add_option("--backend", backend, "cpu, cpu:bf16, cuda, cuda:bf16, ...")->capture_default_str();
  app.add_option("--batch", n, "N")->capture_default_str();
  app.add_option("--tokens", t, "T")->capture_default_str();
  app.add_option("--heads", h, "H")->capture_default_str();
  app.add_option("--head-dim", e, "E")->capture_default_str();
  app.add_option("--warmup", warm, "untimed calls")->capture_default_str();
  app.add_option("--reps", reps, "timed calls (the median is reported)")->capture_default_str();
  app.add_option("--json", json, "write the results here");
  CLI11_PARSE(app, argc, argv);
  try {
    std::string why;
    if (!backend_available(backend, &why)) {
      std::fprintf(stderr, "bench_attention: backend %s is not available: %s\n", backend.c_str(), why.c_str());
      return 2;
    }
    auto be = make_backend(backend);
    Arena arena(*be);
    const DType dt = be->compute_dtype();
    Tensor qkv = arena.tensor({n, t, 3 * h * e}, dt), out = arena.tensor({n, t, h * e}, dt);
    Tensor lse = arena.tensor({n, h, t}, DType::F32), dout = arena.tensor({n, t, h * e}, dt);
    Tensor dqkv = arena.tensor({n, t, 3 * h * e}, dt);
    std::vector<float> host(static_cast<std::size_t>(qkv.numel()));
    Philox rng(1, RngPurpose::Test, 0, 0);
    for (auto& v : host) v = 0.5f * rng.normal();
    be->copy(qkv, Tensor{host.data(), DType::F32, qkv.shape, Device::Host});
    be->copy(dout, Tensor{host.data(), DType::F32, dout.shape, Device::Host});
    // Every tensor touched before the baseline, so the growth of the peak resident memory over the
    // calls is the attention's own (its scratch), not first touches of its outputs.
    be->fill(out, 0.f);
    be->fill(lse, 0.f);
    be->fill(dqkv, 0.f);
    be->synchronize();
    const double tensors_mib = double(qkv.bytes() + out.bytes() + lse.bytes() + dout.bytes() + dqkv.bytes()) / (1 << 20);
    const double inputs_mib = double(qkv.bytes() + out.bytes() + lse.bytes() + dout.bytes()) / (1 << 20);
    const double hwm_before = peak_rss_mib();
    const int heads = static_cast<int>(h);
    const double fwd_s = median_s(*be, warm, reps, [&] { be->attention_fwd(qkv, heads, out, lse); });
    const double bwd_s =
        median_s(*be, warm, reps, [&] { be->attention_bwd(qkv, out, lse, dout, heads, dqkv); });
    const double scratch_mib = std::max(0.0, peak_rss_mib() - hwm_before);
    const double flops = 4.0 * double(n) * double(h) * double(t) * double(t) * double(e);
    const double fwd_tf = flops / fwd_s / 1e12, bwd_tf = 2.5 * flops / bwd_s / 1e12;
    std::string path = be->attention_note();
    if (path.empty()) path = "the backend's default attention";
    for (char& c : path)
      if (c == '"' || c == '\\') c = '\'';
    std::printf("bench_attention %s N %lld T %lld H %lld E %lld: forward %.3f ms %.2f TFLOP/s, backward %.3f ms %.2f TFLOP/s; %s\n",
                backend.c_str(), (long long)n, (long long)t, (long long)h, (long long)e, 1e3 * fwd_s, fwd_tf,
                1e3 * bwd_s, bwd_tf, path.c_str());
    std::printf("  memory: tensors %.1f MiB (the backward's inputs qkv, out, lse, dout %.1f MiB, dqkv the rest); "
                "peak resident growth over the calls %.2f MiB (the host side's scratch); (tensors + growth) / "
                "inputs %.2fx\n",
                tensors_mib, inputs_mib, scratch_mib, (tensors_mib + scratch_mib) / inputs_mib);
    if (!json.empty())
      std::ofstream(json) << "{\"backend\": \"" << backend << "\", \"n\": " << n << ", \"t\": " << t
                          << ", \"h\": " << h << ", \"e\": " << e << ", \"forward_ms\": " << 1e3 * fwd_s
                          << ", \"forward_tflops\": " << fwd_tf << ", \"backward_ms\": " << 1e3 * bwd_s
                          << ", \"backward_tflops\": " << bwd_tf << ", \"path\": \"" << path << "\", \"tensors_mib\": " << tensors_mib
                          << ", \"inputs_mib\": " << inputs_mib << ", \"scratch_mib\": " << scratch_mib << "}\n";
    return 0;
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "bench_attention: error: %s\n", ex.what());
    return 1;
  }
}
