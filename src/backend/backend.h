// The Backend interface: the coarse primitives every layer of dit_mp is written against.
// Each primitive is one kernel launch or library call on its device. Layers, the optimizer and
// diffusion code call only these, so the model exists once for the CPU and the GPU.
//
// Conventions. Tensors are dense row-major views (core/tensor.h). Shapes use the letters
//   N batch, T tokens, D hidden, H heads (local to a tensor-parallel rank), E head dim,
//   K = number of adaLN chunks of D in a modulation tensor (6 in a block, 2 in the final layer).
// Gradient rule: parameter grads accumulate (Accumulate::Add); activation grads overwrite
// (Accumulate::Overwrite) except where the argument says otherwise (the residual stream).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>
#include <string>
#include <string_view>

#include "backend/math.h"
#include "core/clock.h"
#include "core/arena.h"
#include "core/tensor.h"

namespace dit {

enum class Accumulate : std::uint8_t { Overwrite, Add };
enum class Transpose : std::uint8_t { No, Yes };
// Whether softmax_rows computes each row's logsumexp or is given it (see softmax_rows).
enum class SoftmaxStats : std::uint8_t { Compute, Given };

// How a patch of p x p pixels of C channels is flattened into a token's features.
enum class PatchOrder : std::uint8_t {
  ChannelMajor,  // (c, i, j): the order of a Conv2d weight (D, C, p, p), used by the patch embedder
  ChannelMinor,  // (i, j, c): the order of DiT's unpatchify ("nhwpqc -> nchpwq")
};

// One modulation vector among the K chunks of D columns of a (N, K*D) adaLN output.
struct ModChunk {
  Tensor mod;  // (N, K*D)
  int index;   // which chunk: columns [index*D, (index+1)*D)
};

// The norm over each head of q and k (model.qk_norm): RMSNorm or LayerNorm over E, with the
// reference's eps and affine weights (E each; LayerNorm also has biases).
enum class HeadNormKind : std::uint8_t { RmsNorm, LayerNorm };
struct HeadNorm {
  HeadNormKind kind = HeadNormKind::RmsNorm;
  float eps = 1e-6f;
  Tensor q_w, q_b, k_w, k_b;  // of the compute dtype; the biases have no data for RmsNorm
};
struct HeadNormGrads {
  Tensor q_w, q_b, k_w, k_b;  // fp32, accumulated; the biases have no data for RmsNorm
};

// The sizes of C = op(A) op(B) for 2-D views or 3-D strided batches: A stored (ar, ac), B stored
// (br, bc), C (m, n), inner size k. Shared by every backend so they accept and reject the same views.
struct GemmShape {
  std::int64_t batch, m, n, k, ar, ac, br, bc;
};
// Throws naming the three shapes when they do not agree.
GemmShape gemm_shape(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, const Tensor& c);

// The tensors of one per-sample loss (Backend::sample_loss) over a microbatch of N samples: a and
// b the model's side in the storage dtype (the output and the teacher's output, or the student's
// and teacher's features; b empty when the loss reads none), grad a's gradient (a's shape and
// dtype: written, or added to by output distillation), x0 and noise (N, C, H, W) fp32, t (N) int32
// rows of coefs (R, math::kNumLossCoefs) fp32, the path's coefficients (math.h LossCoef: for DDPM
// the schedule table, t the schedule index; for flow one row per sample, t = 0..N-1; read when
// the loss uses_row), terms (N, kTerms) fp32.
struct LossTensors {
  Tensor a = {}, b = {}, grad = {}, x0 = {}, noise = {}, t = {}, coefs = {}, terms = {};
};

// The training step's losses, built from its tensors' shapes (one line naming the tensors when a
// kind does not fit them); grad_scale multiplies the gradient of the mean over the N samples.
// The diffusion loss of `kind` on the output (N, Co, H, W), Co = kind.out_factor() C: EpsilonLoss
// or, for LossTarget::Velocity, VelocityLoss (x0 must be (N, C, H, W); no learned variance).
math::SampleLoss diffusion_loss_fn(const math::LossKind& kind, const Tensor& x0, float grad_scale);
// Output distillation against the teacher's output tout (N, Ct, H, W), Ct = C or 2C; the VB term
// when kind learns the variance (then Ct = 2C).
math::SampleLoss output_distill_fn(const math::LossKind& kind, const Tensor& x0, const Tensor& tout,
                                   float grad_scale);
// Masked feature distillation of student features fs (N, T, D) at `sigma` deviations.
math::SampleLoss feature_distill_fn(const Tensor& fs, double sigma, float grad_scale);
// The loss's N, after checking io's sizes against loss.shape(): one line naming them when not.
std::int64_t check_sample_loss(const math::SampleLoss& loss, const LossTensors& io);

// Where a convolution's kernel goes over its input: the stride, and the zero padding on each side
// (top, bottom, left, right), which may differ (diffusers' Downsample2D pads (0, 1, 0, 1) before a
// stride-2 3x3 convolution).
struct ConvGeometry {
  int stride_h = 1, stride_w = 1;
  int pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  static ConvGeometry same(int pad, int stride = 1) { return {stride, stride, pad, pad, pad, pad}; }
};
// The sizes of y = conv(x, w): x (N, C, H, W), w (K, C, kh, kw), y (N, K, Ho, Wo) with
// Ho = (H + pad_top + pad_bottom - kh) / stride_h + 1. Shared by every backend so they accept and
// reject the same tensors: one line naming the three shapes and the geometry when they disagree.
struct ConvShape {
  std::int64_t n, c, h, w, k, kh, kw, oh, ow;
};
ConvShape conv_shape(const Tensor& x, const Tensor& w, const ConvGeometry& g, const Tensor& y);
// (N, C, L) of a GroupNorm input (N, C, ...): the trailing dims are one axis of L values per
// channel; `groups` must divide C. Throws naming the tensors otherwise.
struct GroupNormShape {
  std::int64_t n, c, len;
};
GroupNormShape group_norm_shape(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                                const Tensor& y);
// Throws naming both shapes unless x is (N, C, H, W) and y (N, C, 2H, 2W).
void check_upsample2x(const Tensor& x, const Tensor& y);

// Where a pooling window goes over its input: the window (kh, kw), the stride, and the zero padding
// on each side as in ConvGeometry (at most half the window, as PyTorch allows, so every window holds
// an in-image pixel).
struct PoolGeometry {
  int kh = 1, kw = 1;
  int stride_h = 1, stride_w = 1;
  int pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  // k x k windows at `stride` with `pad` on every side.
  static PoolGeometry square(int k, int stride, int pad = 0) { return {k, k, stride, stride, pad, pad, pad, pad}; }
  // One window over a whole h x w map: the global pool.
  static PoolGeometry global(int h, int w) { return {h, w, 1, 1, 0, 0, 0, 0}; }
};
// What a pooling window gives: its maximum (the padding takes no part: PyTorch pads max pools with
// -inf) or its mean over the in-image pixels only (count_include_pad=False, TensorFlow's rule) or
// over all kh kw positions, the padding counted as zeros (count_include_pad=True).
enum class PoolKind : std::uint8_t { Max, AverageExcludingPadding, AverageIncludingPadding };
// The sizes of y = pool(x): x (N, C, H, W), y (N, C, Ho, Wo), Ho = (H + pad_top + pad_bottom - kh) /
// stride_h + 1 (floor). One line naming both shapes and the geometry when they disagree.
struct Pool2dShape {
  std::int64_t n, c, h, w, oh, ow;
};
Pool2dShape pool2d_shape(const Tensor& x, const PoolGeometry& g, const Tensor& y);
// Throws naming both shapes unless x is (N, C, H, W) and y (N, C, Ho, Wo) with H, W, Ho, Wo >= 1.
void check_resize(const Tensor& x, const Tensor& y);
// Throws naming both shapes and the offset unless src (N, c, H, W) fits channels
// [offset, offset + c) of dst (N, C, H, W).
void check_copy_channels(const Tensor& src, const Tensor& dst, std::int64_t channel_offset);

class Backend : public Allocator {
 public:
  ~Backend() override = default;
  virtual std::string name() const = 0;
  // Only kernels whose results do not vary run to run (train.deterministic). The CPU backend always
  // is; the CUDA backend otherwise lets cuDNN pick engines that sum with atomics.
  virtual void set_deterministic(bool) {}
  virtual DType compute_dtype() const = 0;  // dtype of activations and params in layer code
  virtual void synchronize() = 0;

  // ---- memory -------------------------------------------------------------------------------
  // Copies between any two tensors of equal numel, across devices, converting the dtype.
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;
  virtual void fill(const Tensor& t, float value) = 0;

  // ---- dense algebra ------------------------------------------------------------------------
  // C = alpha * op(A) op(B) (+ C if acc == Add). 2-D views, or 3-D for a strided batch.
  virtual void gemm(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, const Tensor& c,
                    Accumulate acc, float alpha = 1.f) = 0;
  // C = op(A) op(B) + bias, the bias (n) added to every row of the 2-D C (m, n): a linear layer's
  // forward in one call. The default is gemm then add_rowwise; the CUDA backend adds the bias in
  // cuBLASLt's epilogue, saving a pass over C.
  virtual void gemm_bias(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb,
                         const Tensor& bias, const Tensor& c);
  // y[r, :] += v for every row r of y viewed as (rows, v.numel()): biases, positional embeddings.
  virtual void add_rowwise(const Tensor& y, const Tensor& v) = 0;
  // out (L) (+)= sum over rows of x (R, L): bias gradients.
  virtual void sum_rows(const Tensor& x, const Tensor& out, Accumulate acc) = 0;
  // dst (B, A, C) = src (A, B, C) with the two leading dims swapped: reorders tp-gathered
  // column blocks (tp, N, L) into rows (N, tp * L) and back.
  virtual void transpose_01(const Tensor& src, const Tensor& dst) = 0;
  // y += alpha * x
  virtual void axpy(float alpha, const Tensor& x, const Tensor& y) = 0;
  virtual void scale(const Tensor& x, float alpha) = 0;
  // sum of x^2 accumulated in double, returned on the host (synchronizes)
  virtual double sum_squares(const Tensor& x) = 0;

  // ---- activations --------------------------------------------------------------------------
  virtual void gelu_tanh_fwd(const Tensor& x, const Tensor& y) = 0;
  virtual void gelu_tanh_bwd(const Tensor& x, const Tensor& dy, const Tensor& dx) = 0;
  virtual void silu_fwd(const Tensor& x, const Tensor& y) = 0;
  virtual void silu_bwd(const Tensor& x, const Tensor& dy, const Tensor& dx, Accumulate acc) = 0;
  // y = max(x, 0) (y may be x); forward only, for the frozen image networks.
  virtual void relu_fwd(const Tensor& x, const Tensor& y) = 0;

  // ---- adaLN ----------------------------------------------------------------------------------
  // y = LayerNorm(x) * (1 + scale) + shift, no affine, per token over D; x (N, T, D).
  // Saves mean and rstd (N*T) for backward.
  virtual void ln_modulate_fwd(const Tensor& x, const ModChunk& shift, const ModChunk& scale,
                               float eps, const Tensor& y, const Tensor& mean,
                               const Tensor& rstd) = 0;
  // Gradients of ln_modulate_fwd: dx (residual stream, so acc chooses), and the shift and scale
  // chunks of dmod (overwritten).
  virtual void ln_modulate_bwd(const Tensor& dy, const Tensor& x, const Tensor& mean,
                               const Tensor& rstd, const ModChunk& scale, const Tensor& dx,
                               Accumulate acc, const ModChunk& dshift, const ModChunk& dscale) = 0;
  // x += gate * h (gate broadcast over T); x, h (N, T, D).
  virtual void gate_residual_fwd(const Tensor& x, const Tensor& h, const ModChunk& gate) = 0;
  // dh = gate * dx; dgate = sum_T dx * h (overwrites the gate chunk of dmod).
  virtual void gate_residual_bwd(const Tensor& dx, const Tensor& h, const ModChunk& gate,
                                 const Tensor& dh, const ModChunk& dgate) = 0;

  // ---- block variants (LightningDiT: SwiGLU, RMSNorm, q/k norm, 2-D RoPE) ----------------------
  // h (R, F) = SiLU(x1) * x2 with x12 (R, 2F) = [x1 | x2] per row (math::SiluGate).
  virtual void swiglu_fwd(const Tensor& x12, const Tensor& h) = 0;
  // dx12 (R, 2F) = [dh * x2 * SiLU'(x1) | dh * SiLU(x1)] (overwritten).
  virtual void swiglu_bwd(const Tensor& x12, const Tensor& dh, const Tensor& dx12) = 0;
  // y = RMSNorm(x) * weight * (1 + scale) + shift per token over D; x (N, T, D), weight (D) of the
  // compute dtype, or no data for a norm without weight. Saves rstd (N*T) fp32 for backward.
  virtual void rms_modulate_fwd(const Tensor& x, const Tensor& weight, const ModChunk& shift,
                                const ModChunk& scale, float eps, const Tensor& y,
                                const Tensor& rstd) = 0;
  // Gradients of rms_modulate_fwd: dx (acc chooses), dweight (D) fp32 accumulated (when it has
  // data), and the shift and scale chunks of dmod (overwritten).
  virtual void rms_modulate_bwd(const Tensor& dy, const Tensor& x, const Tensor& rstd,
                                const Tensor& weight, const ModChunk& scale, const Tensor& dx,
                                Accumulate acc, const Tensor& dweight, const ModChunk& dshift,
                                const ModChunk& dscale) = 0;
  // Per-head norm of q and k (LightningDiT's q_norm/k_norm over the head dim E) in qkv
  // (N, T, 3*H*E) laid out as attention_fwd reads it: out gets normalized q and k and a copy of v.
  // mean and rstd (N*T, 2, H) fp32 are saved (mean unused by RMSNorm); see HeadNorm for weights.
  virtual void head_norm_fwd(const Tensor& qkv, int heads, const HeadNorm& p, const Tensor& out,
                             const Tensor& mean, const Tensor& rstd) = 0;
  // dqkv (overwritten) from dout; dv passes through. The weight grads of `g` (fp32, E each) are
  // accumulated.
  virtual void head_norm_bwd(const Tensor& dout, const Tensor& qkv, const Tensor& mean,
                             const Tensor& rstd, int heads, const HeadNorm& p,
                             const HeadNormGrads& g, const Tensor& dqkv) = 0;
  // LightningDiT's 2-D axial rotary embedding (math::rope_angle) of q and k in qkv (N, T, 3*H*E),
  // T = grid^2 tokens row-major; out gets the rotated q and k and a copy of v (out may be qkv).
  virtual void rope_fwd(const Tensor& qkv, int heads, int grid, const Tensor& out) = 0;
  // Its adjoint (the inverse rotation) on a gradient of the same layout; dqkv may be dout.
  virtual void rope_bwd(const Tensor& dout, int heads, int grid, const Tensor& dqkv) = 0;

  // ---- attention ----------------------------------------------------------------------------
  // Fused softmax(q k^T / sqrt(E)) v over heads. qkv (N, T, 3*H*E) laid out [q | k | v] with
  // heads contiguous inside each; out (N, T, H*E); lse (N, H, T) row logsumexp kept for backward
  // (no T x T matrix is stored).
  virtual void attention_fwd(const Tensor& qkv, int heads, const Tensor& out, const Tensor& lse) = 0;
  virtual void attention_bwd(const Tensor& qkv, const Tensor& out, const Tensor& lse,
                             const Tensor& dout, int heads, const Tensor& dqkv) = 0;

  // ---- attention rows: the steps of the composed attention (backend/composed_attention.h) ----
  // Scores s (R, L) fp32 into probabilities p (R, L) of s's dtype or the compute dtype (p may be
  // s). SoftmaxStats::Compute writes lse (R) fp32, lse_r = log sum_j exp(s_rj), and
  // p = softmax(s); SoftmaxStats::Given reads lse and recomputes p = exp(s - lse) (backward).
  virtual void softmax_rows(const Tensor& s, const Tensor& p, const Tensor& lse,
                            SoftmaxStats stats) = 0;
  // ds (R, L) = p * (dp - delta_r) (math::softmax_grad): the softmax backward given
  // delta_r = rowsum(dO o O). dp and delta fp32; ds of p's dtype, and may be p or dp.
  virtual void softmax_rows_bwd(const Tensor& p, const Tensor& dp, const Tensor& delta,
                                const Tensor& ds) = 0;
  // out (R) fp32 = sum_j a_rj b_rj for a, b (R, L) of one float dtype.
  virtual void row_dot(const Tensor& a, const Tensor& b, const Tensor& out) = 0;

  // Device bytes the backend holds for its own temporaries (the composed attention's workspace,
  // staging of converting copies): the most held so far. A memory plan adds it to the arenas.
  virtual std::size_t workspace_bytes() const { return 0; }
  // Sizes the staging of host-to-device copies for steps that upload `bytes_per_step` (two steps'
  // worth is kept). Call before the first step: it may allocate and wait; later steps then
  // allocate nothing for their uploads. Backends without staging ignore it.
  virtual void reserve_uploads(std::size_t bytes_per_step) {}
  // Which attention implementation served and, when a fused library fell back, why: one short
  // line for a run's accounting ("" when attention ran as configured with nothing to say).
  virtual std::string attention_note() const { return {}; }
  // Free and total bytes of the device this backend computes on (cudaMemGetInfo: every process's
  // use of the GPU counts); false on a backend without a device memory of its own.
  virtual bool device_memory(std::size_t* free, std::size_t* total) const { return false; }

  // ---- image networks (the VAE): NCHW activations ---------------------------------------------
  // y (N, K, Ho, Wo) (+)= conv(x (N, C, H, W), w (K, C, kh, kw)) + bias (K; a tensor without
  // data: none), zero padding and stride as `g` says (conv_shape checks the sizes). Accumulate::Add
  // adds to y in one rounding (a ResNet block's residual). Forward only: the networks that use it
  // are frozen.
  virtual void conv2d_fwd(const Tensor& x, const Tensor& w, const Tensor& bias,
                          const ConvGeometry& g, const Tensor& y, Accumulate acc) = 0;
  // y = GroupNorm(x) * gamma + beta per sample over `groups` groups of C / groups channels, x and
  // y (N, C, ...) (y may be x), gamma and beta (C); statistics in fp32 or wider, variance biased
  // as torch's. With `silu`, y = SiLU of that (the norm-then-activation of a ResNet block).
  virtual void group_norm_fwd(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                              float eps, bool silu, const Tensor& y) = 0;
  // y (N, C, 2H, 2W) = x (N, C, H, W) with each pixel repeated 2 x 2 (nearest-neighbour upsampling).
  virtual void upsample_nearest2x(const Tensor& x, const Tensor& y) = 0;
  // y (N, C, Ho, Wo) = the maximum or mean (`kind`) of each window of x (N, C, H, W) that `g`
  // places (pool2d_shape checks the sizes); means are summed in fp32 or wider.
  virtual void pool2d_fwd(const Tensor& x, const PoolGeometry& g, PoolKind kind, const Tensor& y) = 0;
  // y (N, C, Ho, Wo) = x (N, C, H, W) resized bilinearly as F.interpolate(mode="bilinear",
  // align_corners=False, antialias=False): each output pixel mixes the 2 x 2 source pixels that
  // math::bilinear_tap picks along each axis (a same-size axis is copied).
  virtual void resize_bilinear(const Tensor& x, const Tensor& y) = 0;
  // Channels [offset, offset + c) of dst (N, C, H, W) = src (N, c, H, W), the rest of dst kept:
  // torch.cat of branches along channels, one branch at a time.
  virtual void copy_channels(const Tensor& src, const Tensor& dst, std::int64_t channel_offset) = 0;

  // ---- embeddings ---------------------------------------------------------------------------
  // out[n] = table[ids[n]]; ids (N) int32, table (V, D), out (N, D)
  virtual void embedding_fwd(const Tensor& table, const Tensor& ids, const Tensor& out) = 0;
  // dtable[ids[n]] += dout[n]
  virtual void embedding_bwd(const Tensor& dout, const Tensor& ids, const Tensor& dtable) = 0;
  // DiT's sinusoidal timestep features: out[n] = [cos(t_n f), sin(t_n f)], f_i = P^(-i/half),
  // half = F/2, P = max_period; t (N) fp32, out (N, F) (a zero column is appended when F is odd).
  virtual void timestep_embedding(const Tensor& t, float max_period, const Tensor& out) = 0;
  // img (N, C, Hi, Wi) -> patches (N, T, C*p*p), T = (Hi/p)(Wi/p), tokens row-major over the grid
  virtual void patchify(const Tensor& img, int p, PatchOrder order, const Tensor& patches) = 0;
  // The inverse (and adjoint) of patchify.
  virtual void unpatchify(const Tensor& patches, int p, PatchOrder order, const Tensor& img) = 0;

  // ---- diffusion ----------------------------------------------------------------------------
  // Rows of the microbatch: t (N) int32 row indices into `coefs` (R, math::kNumLossCoefs) fp32,
  // the path's coefficients (math.h LossCoef): for DDPM the schedule table (R = T, t the schedule
  // index), for flow one row per sample (diffusion::flow_coef_rows, t = 0..N-1). x0 (the data)
  // and noise (N, C, H, W) fp32.
  // noise (N, P) fp32: row i holds normal numbers 0..P-1 of the Philox stream
  // (seed, purpose, step, first + i) (core/philox.h): the numbers the host's Philox draws.
  virtual void philox_normal(std::uint64_t seed, std::uint32_t purpose, std::uint64_t step,
                             std::uint64_t first, const Tensor& noise) = 0;
  // x_t = a x0 + b noise with a = kSqrtAlphasCumprod, b = kSqrtOneMinusAlphasCumprod of the row
  // (DDPM: sqrt(abar_t), sqrt(1 - abar_t); flow: t, 1 - t), in x_t's dtype.
  virtual void q_sample(const Tensor& x0, const Tensor& noise, const Tensor& t,
                        const Tensor& coefs, const Tensor& x_t) = 0;
  // ---- per-sample losses (math.h: the closed list SampleLoss) ----------------------------------
  // Applies `loss` to every sample of a microbatch (math.h says what a loss is): its passes over
  // the sample's items, then the sample's terms row. One entry point for every recipe's loss: a
  // new loss is a functor in math.h, not a method here. The tensors' per-sample sizes are checked
  // against loss.shape() (check_sample_loss); a schedule index outside coefs is an error.
  virtual void sample_loss(const math::SampleLoss& loss, const LossTensors& io) = 0;

  // ---- optimizer over flat ranges -----------------------------------------------------------
  // AdamW on fp32 master params with fp32 moments; grad may be any float dtype.
  virtual void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                          const Tensor& exp_avg_sq, const math::AdamWParams& h) = 0;
  // ema = decay * ema + (1 - decay) * param
  virtual void ema_step(const Tensor& ema, const Tensor& param, float decay) = 0;
  // One pass: AdamW on the fp32 master, then the EMA towards it, then (when `param` has data) the
  // storage copy of the master in param's dtype.
  virtual void adamw_ema_step(const Tensor& master, const Tensor& grad, const Tensor& exp_avg,
                              const Tensor& exp_avg_sq, const Tensor& ema, const Tensor& param,
                              const math::AdamWParams& h, float decay) = 0;
  // sum over the rows [begin, end) of `ranges` (R, 2) int32 of x[i]^2, accumulated in double and
  // returned on the host (a sync point): the global norm's one reduction per step.
  virtual double sum_squares_ranges(const Tensor& x, const Tensor& ranges) = 0;

  // ---- synchronization ------------------------------------------------------------------------
  // Times the host has waited for this backend: synchronize(), results returned to the host
  // (sum_squares*) and copies from backend memory into host memory. The CPU backend counts the
  // same points, so a test on the CPU bounds a GPU step's waits.
  virtual std::uint64_t host_syncs() const { return host_syncs_; }

  // ---- timeline marks (for the GPU check's kernel and gap shares) ------------------------------
  // A mark on the device timeline after the work issued so far: a CUDA event on the stream; on
  // the CPU, whose primitives have finished on return, the host clock. Marks count from 0 after
  // clear_marks(). seconds_between(a, b) reads two marks (it waits for b).
  virtual std::size_t mark() {
    marks_.push_back(now_s());
    return marks_.size() - 1;
  }
  virtual double seconds_between(std::size_t a, std::size_t b) { return marks_.at(b) - marks_.at(a); }
  virtual void clear_marks() { marks_.clear(); }

 protected:
  void count_sync() { ++host_syncs_; }

 private:
  std::uint64_t host_syncs_ = 0;
  std::vector<double> marks_;  // host-clock marks (the default)
};

// The backends this build has: "cpu" always, "cuda" when compiled in and a GPU is visible.
// A name may carry the compute dtype after a colon, "cuda:bf16" (default fp32). "cpu:bf16" and
// "cpu:fp16" store in 16 bits and compute in fp32, as the GPU does (cpu/storage_backend.h).
std::unique_ptr<Backend> make_backend(std::string_view name);
std::unique_ptr<Backend> make_backend(std::string_view name, DType compute);
bool backend_available(std::string_view name, std::string* why_not = nullptr);

}  // namespace dit
