// The planning backend: it hands out address space and runs no kernel. `dit_mp plan` trains one
// step of the real Trainer on it, so the memory a layout needs (flat buffers, activation arenas,
// scratch) comes from the code's own allocations rather than from a formula kept beside it.
// Pointers it returns are never dereferenced: tensors on Device::Virtual are only passed around.
#pragma once

#include <algorithm>
#include <memory>

#include "backend/backend.h"
#include "backend/conv_scratch.h"
#include "backend/composed_attention.h"

namespace dit {

class VirtualBackend final : public Backend {
 public:
  // How the planned backend runs attention: its own fused kernel (the CPU backend's default; no
  // workspace) or the composed attention (the GPU's path when cuDNN cannot serve, and the CPU's
  // under DIT_ATTENTION=composed), whose workspace is then counted.
  enum class Attention : std::uint8_t { Fused, Composed };
  explicit VirtualBackend(DType compute, Attention attention = Attention::Composed)
      : dtype_(compute), attention_(attention) {}
  std::string name() const override { return "virtual"; }
  DType compute_dtype() const override { return dtype_; }
  Device device() const override { return Device::Virtual; }
  void* allocate(std::size_t bytes) override;
  void deallocate(void*) override {}
  // Every byte handed out so far, alignment included (nothing is ever given back): a pass planned
  // on a fresh backend allocates its peak.
  std::size_t allocated_bytes() const { return next_ - kFirstAddress; }
  void synchronize() override {}

  void copy(const Tensor&, const Tensor&) override {}
  void fill(const Tensor&, float) override {}
  void gemm(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, const Tensor& c,
            Accumulate, float) override {
    gemm_shape(a, ta, b, tb, c);  // the same shape rule as every backend
  }
  void gemm_bias(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, const Tensor&,
                 const Tensor& c) override {
    gemm_shape(a, ta, b, tb, c);
  }
  void add_rowwise(const Tensor&, const Tensor&) override {}
  void sum_rows(const Tensor&, const Tensor&, Accumulate) override {}
  void transpose_01(const Tensor&, const Tensor&) override {}
  void axpy(float, const Tensor&, const Tensor&) override {}
  void scale(const Tensor&, float) override {}
  double sum_squares(const Tensor&) override { return 0; }

  void gelu_tanh_fwd(const Tensor&, const Tensor&) override {}
  void gelu_tanh_bwd(const Tensor&, const Tensor&, const Tensor&) override {}
  void silu_fwd(const Tensor&, const Tensor&) override {}
  void silu_bwd(const Tensor&, const Tensor&, const Tensor&, Accumulate) override {}
  void relu_fwd(const Tensor&, const Tensor&) override {}
  void ln_modulate_fwd(const Tensor&, const ModChunk&, const ModChunk&, float, const Tensor&,
                       const Tensor&, const Tensor&) override {}
  void ln_modulate_bwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const ModChunk&,
                       const Tensor&, Accumulate, const ModChunk&, const ModChunk&) override {}
  void gate_residual_fwd(const Tensor&, const Tensor&, const ModChunk&) override {}
  void gate_residual_bwd(const Tensor&, const Tensor&, const ModChunk&, const Tensor&,
                         const ModChunk&) override {}
  void swiglu_fwd(const Tensor&, const Tensor&) override {}
  void swiglu_bwd(const Tensor&, const Tensor&, const Tensor&) override {}
  void rms_modulate_fwd(const Tensor&, const Tensor&, const ModChunk&, const ModChunk&, float,
                        const Tensor&, const Tensor&) override {}
  void rms_modulate_bwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const ModChunk&,
                        const Tensor&, Accumulate, const Tensor&, const ModChunk&,
                        const ModChunk&) override {}
  void head_norm_fwd(const Tensor&, int, const HeadNorm&, const Tensor&, const Tensor&,
                     const Tensor&) override {}
  void head_norm_bwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int,
                     const HeadNorm&, const HeadNormGrads&, const Tensor&) override {}
  void rope_fwd(const Tensor&, int, int, const Tensor&) override {}
  void rope_bwd(const Tensor&, int, int, const Tensor&) override {}
  // Attention is planned as the composed attention, the GPU's path when cuDNN cannot serve: its
  // workspace is then counted (workspace_bytes) and its GEMM shapes checked.
  void attention_fwd(const Tensor& qkv, int heads, const Tensor& out, const Tensor& lse) override {
    if (attention_ == Attention::Composed) composed_.forward(*this, qkv, heads, out, lse);
  }
  void attention_bwd(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& dout,
                     int heads, const Tensor& dqkv) override {
    if (attention_ == Attention::Composed) composed_.backward(*this, qkv, out, lse, dout, heads, dqkv);
  }
  void softmax_rows(const Tensor&, const Tensor&, const Tensor&, SoftmaxStats) override {}
  void softmax_rows_bwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void row_dot(const Tensor&, const Tensor&, const Tensor&) override {}
  // The composed attention's workspace, or the im2col patches of the largest convolution (the CUDA
  // backend's scratch), whichever is larger.
  std::size_t workspace_bytes() const override { return std::max(composed_.workspace_bytes(), conv_scratch_); }
  void conv2d_fwd(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvGeometry& g, const Tensor& y,
                  Accumulate acc) override {
    const ConvShape s = conv_shape(x, w, g, y);
    conv_scratch_ = std::max(conv_scratch_, conv_scratch(s, x.dtype, bias.data != nullptr, acc).total());
  }
  void group_norm_fwd(const Tensor&, int, const Tensor&, const Tensor&, float, bool, const Tensor&) override {}
  void upsample_nearest2x(const Tensor&, const Tensor&) override {}
  // The pooling, resize and channel copies use no scratch: only their shapes are checked.
  void pool2d_fwd(const Tensor& x, const PoolGeometry& g, PoolKind, const Tensor& y) override { pool2d_shape(x, g, y); }
  void resize_bilinear(const Tensor& x, const Tensor& y) override { check_resize(x, y); }
  void copy_channels(const Tensor& src, const Tensor& dst, std::int64_t channel_offset) override {
    check_copy_channels(src, dst, channel_offset);
  }
  void embedding_fwd(const Tensor&, const Tensor&, const Tensor&) override {}
  void embedding_bwd(const Tensor&, const Tensor&, const Tensor&) override {}
  void timestep_embedding(const Tensor&, float, const Tensor&) override {}
  void patchify(const Tensor&, int, PatchOrder, const Tensor&) override {}
  void unpatchify(const Tensor&, int, PatchOrder, const Tensor&) override {}
  void adamw_step(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                  const math::AdamWParams&) override {}
  void ema_step(const Tensor&, const Tensor&, float) override {}
  void adamw_ema_step(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                      const Tensor&, const math::AdamWParams&, float) override {}
  double sum_squares_ranges(const Tensor&, const Tensor&) override { return 0; }
  void philox_normal(std::uint64_t, std::uint32_t, std::uint64_t, std::uint64_t,
                     const Tensor&) override {}
  void q_sample(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void sample_loss(const math::SampleLoss&, const LossTensors&) override {}

 private:
  DType dtype_;
  Attention attention_;
  static constexpr std::uintptr_t kFirstAddress = 4096;
  std::uintptr_t next_ = kFirstAddress;  // the next address handed out
  std::size_t conv_scratch_ = 0;
  ComposedAttention composed_{*this};
};

}  // namespace dit
