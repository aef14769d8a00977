// A backend that times another: every compute primitive is bracketed by two timeline marks
// (Backend::mark: CUDA events on the GPU), so a benchmark can split a step into time inside
// primitives ("kernels") and time between them (launch overhead, host work, communication
// waits: "gaps"). It forwards memory, dtype and sync counting to the backend it wraps; hand
// communicators the wrapped backend (NCCL needs the CUDA backend itself).
#pragma once

#include <utility>
#include <vector>

#include "backend/backend.h"

namespace dit {

class TimedBackend final : public Backend {
 public:
  explicit TimedBackend(Backend& inner) : in_(inner) {}

  // Seconds inside primitives since the last reset() (waits for the device), and the span from
  // reset() to now on the device timeline.
  double kernel_seconds();
  double span_seconds();
  void reset();
  // Off, the primitives run without marks (the throughput a run sees); on after reset().
  void set_enabled(bool on) { enabled_ = on; }

  std::string name() const override { return in_.name() + " (timed)"; }
  void set_deterministic(bool d) override { in_.set_deterministic(d); }
  DType compute_dtype() const override { return in_.compute_dtype(); }
  Device device() const override { return in_.device(); }
  void* allocate(std::size_t bytes) override { return in_.allocate(bytes); }
  void deallocate(void* p) override { in_.deallocate(p); }
  std::size_t page_bytes() const override { return in_.page_bytes(); }
  bool release_pages(void* p, std::size_t bytes) override { return in_.release_pages(p, bytes); }
  bool can_release_pages() const override { return in_.can_release_pages(); }
  void synchronize() override { in_.synchronize(); }
  std::uint64_t host_syncs() const override { return in_.host_syncs(); }

  void copy(const Tensor& dst, const Tensor& src) override { timed([&] { in_.copy(dst, src); }); }
  void fill(const Tensor& t, float v) override { timed([&] { in_.fill(t, v); }); }
  void gemm(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, const Tensor& c,
            Accumulate acc, float alpha) override {
    timed([&] { in_.gemm(a, ta, b, tb, c, acc, alpha); });
  }
  void gemm_bias(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, const Tensor& bias,
                 const Tensor& c) override {
    timed([&] { in_.gemm_bias(a, ta, b, tb, bias, c); });
  }
  void add_rowwise(const Tensor& y, const Tensor& v) override { timed([&] { in_.add_rowwise(y, v); }); }
  void sum_rows(const Tensor& x, const Tensor& out, Accumulate acc) override {
    timed([&] { in_.sum_rows(x, out, acc); });
  }
  void transpose_01(const Tensor& s, const Tensor& d) override { timed([&] { in_.transpose_01(s, d); }); }
  void axpy(float a, const Tensor& x, const Tensor& y) override { timed([&] { in_.axpy(a, x, y); }); }
  void scale(const Tensor& x, float a) override { timed([&] { in_.scale(x, a); }); }
  double sum_squares(const Tensor& x) override { return in_.sum_squares(x); }

  void gelu_tanh_fwd(const Tensor& x, const Tensor& y) override { timed([&] { in_.gelu_tanh_fwd(x, y); }); }
  void gelu_tanh_bwd(const Tensor& x, const Tensor& dy, const Tensor& dx) override {
    timed([&] { in_.gelu_tanh_bwd(x, dy, dx); });
  }
  void silu_fwd(const Tensor& x, const Tensor& y) override { timed([&] { in_.silu_fwd(x, y); }); }
  void silu_bwd(const Tensor& x, const Tensor& dy, const Tensor& dx, Accumulate acc) override {
    timed([&] { in_.silu_bwd(x, dy, dx, acc); });
  }
  void relu_fwd(const Tensor& x, const Tensor& y) override {
    timed([&] { in_.relu_fwd(x, y); });
  }
  void ln_modulate_fwd(const Tensor& x, const ModChunk& shift, const ModChunk& scale, float eps,
                       const Tensor& y, const Tensor& mean, const Tensor& rstd) override {
    timed([&] { in_.ln_modulate_fwd(x, shift, scale, eps, y, mean, rstd); });
  }
  void ln_modulate_bwd(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                       const ModChunk& scale, const Tensor& dx, Accumulate acc,
                       const ModChunk& dshift, const ModChunk& dscale) override {
    timed([&] { in_.ln_modulate_bwd(dy, x, mean, rstd, scale, dx, acc, dshift, dscale); });
  }
  void gate_residual_fwd(const Tensor& x, const Tensor& h, const ModChunk& gate) override {
    timed([&] { in_.gate_residual_fwd(x, h, gate); });
  }
  void gate_residual_bwd(const Tensor& dx, const Tensor& h, const ModChunk& gate, const Tensor& dh,
                         const ModChunk& dgate) override {
    timed([&] { in_.gate_residual_bwd(dx, h, gate, dh, dgate); });
  }
  void swiglu_fwd(const Tensor& x12, const Tensor& h) override { timed([&] { in_.swiglu_fwd(x12, h); }); }
  void swiglu_bwd(const Tensor& x12, const Tensor& dh, const Tensor& dx12) override {
    timed([&] { in_.swiglu_bwd(x12, dh, dx12); });
  }
  void rms_modulate_fwd(const Tensor& x, const Tensor& w, const ModChunk& shift,
                        const ModChunk& scale, float eps, const Tensor& y,
                        const Tensor& rstd) override {
    timed([&] { in_.rms_modulate_fwd(x, w, shift, scale, eps, y, rstd); });
  }
  void rms_modulate_bwd(const Tensor& dy, const Tensor& x, const Tensor& rstd, const Tensor& w,
                        const ModChunk& scale, const Tensor& dx, Accumulate acc, const Tensor& dw,
                        const ModChunk& dshift, const ModChunk& dscale) override {
    timed([&] { in_.rms_modulate_bwd(dy, x, rstd, w, scale, dx, acc, dw, dshift, dscale); });
  }
  void head_norm_fwd(const Tensor& qkv, int heads, const HeadNorm& p, const Tensor& out,
                     const Tensor& mean, const Tensor& rstd) override {
    timed([&] { in_.head_norm_fwd(qkv, heads, p, out, mean, rstd); });
  }
  void head_norm_bwd(const Tensor& dout, const Tensor& qkv, const Tensor& mean, const Tensor& rstd,
                     int heads, const HeadNorm& p, const HeadNormGrads& g,
                     const Tensor& dqkv) override {
    timed([&] { in_.head_norm_bwd(dout, qkv, mean, rstd, heads, p, g, dqkv); });
  }
  void rope_fwd(const Tensor& qkv, int heads, int grid, const Tensor& out) override {
    timed([&] { in_.rope_fwd(qkv, heads, grid, out); });
  }
  void rope_bwd(const Tensor& dout, int heads, int grid, const Tensor& dqkv) override {
    timed([&] { in_.rope_bwd(dout, heads, grid, dqkv); });
  }
  void attention_fwd(const Tensor& qkv, int heads, const Tensor& out, const Tensor& lse) override {
    timed([&] { in_.attention_fwd(qkv, heads, out, lse); });
  }
  void attention_bwd(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& dout,
                     int heads, const Tensor& dqkv) override {
    timed([&] { in_.attention_bwd(qkv, out, lse, dout, heads, dqkv); });
  }
  void softmax_rows(const Tensor& s, const Tensor& p, const Tensor& lse, SoftmaxStats st) override {
    timed([&] { in_.softmax_rows(s, p, lse, st); });
  }
  void softmax_rows_bwd(const Tensor& p, const Tensor& dp, const Tensor& delta,
                        const Tensor& ds) override {
    timed([&] { in_.softmax_rows_bwd(p, dp, delta, ds); });
  }
  void row_dot(const Tensor& a, const Tensor& b, const Tensor& out) override {
    timed([&] { in_.row_dot(a, b, out); });
  }
  std::size_t workspace_bytes() const override { return in_.workspace_bytes(); }
  void reserve_uploads(std::size_t bytes_per_step) override { in_.reserve_uploads(bytes_per_step); }
  std::string attention_note() const override { return in_.attention_note(); }
  void conv2d_fwd(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvGeometry& g,
                  const Tensor& y, Accumulate acc) override {
    timed([&] { in_.conv2d_fwd(x, w, bias, g, y, acc); });
  }
  void group_norm_fwd(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta, float eps,
                      bool silu, const Tensor& y) override {
    timed([&] { in_.group_norm_fwd(x, groups, gamma, beta, eps, silu, y); });
  }
  void upsample_nearest2x(const Tensor& x, const Tensor& y) override {
    timed([&] { in_.upsample_nearest2x(x, y); });
  }
  void pool2d_fwd(const Tensor& x, const PoolGeometry& g, PoolKind kind, const Tensor& y) override {
    timed([&] { in_.pool2d_fwd(x, g, kind, y); });
  }
  void resize_bilinear(const Tensor& x, const Tensor& y) override {
    timed([&] { in_.resize_bilinear(x, y); });
  }
  void copy_channels(const Tensor& src, const Tensor& dst, std::int64_t channel_offset) override {
    timed([&] { in_.copy_channels(src, dst, channel_offset); });
  }
  void embedding_fwd(const Tensor& t, const Tensor& ids, const Tensor& out) override {
    timed([&] { in_.embedding_fwd(t, ids, out); });
  }
  void embedding_bwd(const Tensor& dout, const Tensor& ids, const Tensor& dt) override {
    timed([&] { in_.embedding_bwd(dout, ids, dt); });
  }
  void timestep_embedding(const Tensor& t, float p, const Tensor& out) override {
    timed([&] { in_.timestep_embedding(t, p, out); });
  }
  void patchify(const Tensor& img, int p, PatchOrder o, const Tensor& patches) override {
    timed([&] { in_.patchify(img, p, o, patches); });
  }
  void unpatchify(const Tensor& patches, int p, PatchOrder o, const Tensor& img) override {
    timed([&] { in_.unpatchify(patches, p, o, img); });
  }
  void philox_normal(std::uint64_t seed, std::uint32_t purpose, std::uint64_t step,
                     std::uint64_t first, const Tensor& noise) override {
    timed([&] { in_.philox_normal(seed, purpose, step, first, noise); });
  }
  void q_sample(const Tensor& x0, const Tensor& noise, const Tensor& t, const Tensor& coefs,
                const Tensor& x_t) override {
    timed([&] { in_.q_sample(x0, noise, t, coefs, x_t); });
  }
  void sample_loss(const math::SampleLoss& loss, const LossTensors& io) override {
    timed([&] { in_.sample_loss(loss, io); });
  }
  void adamw_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                  const math::AdamWParams& h) override {
    timed([&] { in_.adamw_step(p, g, m, v, h); });
  }
  void ema_step(const Tensor& ema, const Tensor& p, float decay) override {
    timed([&] { in_.ema_step(ema, p, decay); });
  }
  void adamw_ema_step(const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v,
                      const Tensor& ema, const Tensor& param, const math::AdamWParams& h,
                      float decay) override {
    timed([&] { in_.adamw_ema_step(master, grad, m, v, ema, param, h, decay); });
  }
  double sum_squares_ranges(const Tensor& x, const Tensor& ranges) override {
    return in_.sum_squares_ranges(x, ranges);  // a sync point: its wait is not kernel time
  }

 private:
  template <typename Fn>
  void timed(Fn&& fn) {
    if (!enabled_) return fn();
    const std::size_t a = in_.mark();
    fn();
    pairs_.emplace_back(a, in_.mark());
  }

  Backend& in_;
  std::vector<std::pair<std::size_t, std::size_t>> pairs_;  // marks around each primitive
  std::size_t start_ = 0;                                    // the mark of the last reset()
  bool enabled_ = false;
};

}  // namespace dit
