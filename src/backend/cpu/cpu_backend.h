// The CPU backend: fp32 throughout, its own packed GEMM (packed_gemm.h), OpenMP loops inside a rank (OMP_NUM_THREADS).
// It is the reference every other backend is tested against.
#pragma once

#include <map>
#include <memory>

#include "backend/attention_path.h"
#include "backend/backend.h"
#include "backend/composed_attention.h"

namespace dit {

class CpuBackend final : public Backend {
 public:
  // Attention runs the CPU's own fused kernel (attention.cpp), or the composed attention under
  // DIT_ATTENTION=composed (or set_attention_path).
  CpuBackend();
  ~CpuBackend() override;
  std::string name() const override { return "cpu"; }
  DType compute_dtype() const override { return DType::F32; }
  Device device() const override { return Device::Host; }
  void* allocate(std::size_t bytes) override;
  void deallocate(void* p) override;
  bool release_pages(void* p, std::size_t bytes) override;  // madvise(MADV_DONTNEED)
  bool can_release_pages() const override { return true; }
  void synchronize() override { count_sync(); }

  void copy(const Tensor& dst, const Tensor& src) override;
  void fill(const Tensor& t, float value) override;

  void gemm(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, const Tensor& c,
            Accumulate acc, float alpha) override;
  void add_rowwise(const Tensor& y, const Tensor& v) override;
  void sum_rows(const Tensor& x, const Tensor& out, Accumulate acc) override;
  void transpose_01(const Tensor& src, const Tensor& dst) override;
  void axpy(float alpha, const Tensor& x, const Tensor& y) override;
  void scale(const Tensor& x, float alpha) override;
  double sum_squares(const Tensor& x) override;

  void gelu_tanh_fwd(const Tensor& x, const Tensor& y) override;
  void gelu_tanh_bwd(const Tensor& x, const Tensor& dy, const Tensor& dx) override;
  void silu_fwd(const Tensor& x, const Tensor& y) override;
  void silu_bwd(const Tensor& x, const Tensor& dy, const Tensor& dx, Accumulate acc) override;
  void relu_fwd(const Tensor& x, const Tensor& y) override;

  void ln_modulate_fwd(const Tensor& x, const ModChunk& shift, const ModChunk& scale, float eps,
                       const Tensor& y, const Tensor& mean, const Tensor& rstd) override;
  void ln_modulate_bwd(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                       const ModChunk& scale, const Tensor& dx, Accumulate acc,
                       const ModChunk& dshift, const ModChunk& dscale) override;
  void gate_residual_fwd(const Tensor& x, const Tensor& h, const ModChunk& gate) override;
  void gate_residual_bwd(const Tensor& dx, const Tensor& h, const ModChunk& gate, const Tensor& dh,
                         const ModChunk& dgate) override;

  void swiglu_fwd(const Tensor& x12, const Tensor& h) override;
  void swiglu_bwd(const Tensor& x12, const Tensor& dh, const Tensor& dx12) override;
  void rms_modulate_fwd(const Tensor& x, const Tensor& weight, const ModChunk& shift,
                        const ModChunk& scale, float eps, const Tensor& y,
                        const Tensor& rstd) override;
  void rms_modulate_bwd(const Tensor& dy, const Tensor& x, const Tensor& rstd, const Tensor& weight,
                        const ModChunk& scale, const Tensor& dx, Accumulate acc,
                        const Tensor& dweight, const ModChunk& dshift,
                        const ModChunk& dscale) override;
  void head_norm_fwd(const Tensor& qkv, int heads, const HeadNorm& p, const Tensor& out,
                     const Tensor& mean, const Tensor& rstd) override;
  void head_norm_bwd(const Tensor& dout, const Tensor& qkv, const Tensor& mean, const Tensor& rstd,
                     int heads, const HeadNorm& p, const HeadNormGrads& g,
                     const Tensor& dqkv) override;
  void rope_fwd(const Tensor& qkv, int heads, int grid, const Tensor& out) override;
  void rope_bwd(const Tensor& dout, int heads, int grid, const Tensor& dqkv) override;

  void attention_fwd(const Tensor& qkv, int heads, const Tensor& out, const Tensor& lse) override;
  void attention_bwd(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& dout,
                     int heads, const Tensor& dqkv) override;
  void softmax_rows(const Tensor& s, const Tensor& p, const Tensor& lse, SoftmaxStats stats) override;
  void softmax_rows_bwd(const Tensor& p, const Tensor& dp, const Tensor& delta,
                        const Tensor& ds) override;
  void row_dot(const Tensor& a, const Tensor& b, const Tensor& out) override;
  std::size_t workspace_bytes() const override;
  std::string attention_note() const override;
  void set_attention_path(AttentionPath p) { attention_path_ = p; }

  void conv2d_fwd(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvGeometry& g,
                  const Tensor& y, Accumulate acc) override;
  void group_norm_fwd(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta, float eps,
                      bool silu, const Tensor& y) override;
  void upsample_nearest2x(const Tensor& x, const Tensor& y) override;
  void pool2d_fwd(const Tensor& x, const PoolGeometry& g, PoolKind kind, const Tensor& y) override;
  void resize_bilinear(const Tensor& x, const Tensor& y) override;
  void copy_channels(const Tensor& src, const Tensor& dst, std::int64_t channel_offset) override;

  void embedding_fwd(const Tensor& table, const Tensor& ids, const Tensor& out) override;
  void embedding_bwd(const Tensor& dout, const Tensor& ids, const Tensor& dtable) override;
  void timestep_embedding(const Tensor& t, float max_period, const Tensor& out) override;
  void patchify(const Tensor& img, int p, PatchOrder order, const Tensor& patches) override;
  void unpatchify(const Tensor& patches, int p, PatchOrder order, const Tensor& img) override;

  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                  const Tensor& exp_avg_sq, const math::AdamWParams& h) override;
  void ema_step(const Tensor& ema, const Tensor& param, float decay) override;
  void adamw_ema_step(const Tensor& master, const Tensor& grad, const Tensor& exp_avg,
                      const Tensor& exp_avg_sq, const Tensor& ema, const Tensor& param,
                      const math::AdamWParams& h, float decay) override;
  double sum_squares_ranges(const Tensor& x, const Tensor& ranges) override;

  void philox_normal(std::uint64_t seed, std::uint32_t purpose, std::uint64_t step,
                     std::uint64_t first, const Tensor& noise) override;
  void q_sample(const Tensor& x0, const Tensor& noise, const Tensor& t, const Tensor& coefs,
                const Tensor& x_t) override;
  void sample_loss(const math::SampleLoss& loss, const LossTensors& io) override;

  // Whether p lies in memory this backend allocated (a copy from it into other host memory is a
  // download: a sync point on a GPU, counted here the same way).
  bool owns(const void* p) const;

 private:
  std::map<std::uintptr_t, std::size_t> blocks_;  // start -> bytes of each live allocation
  AttentionPath attention_path_;
  std::unique_ptr<ComposedAttention> composed_;  // made on first use
};

// Threads of the CPU backend (OpenMP loops and Eigen products) in this process.
void cpu_set_num_threads(int n);

// Row-major fp32 GEMM on raw pointers (packed_gemm.h's kernel, or Eigen), shared by gemm(), the
// attention kernels and the convolution:
// C (m x n) = alpha * op(A) op(B) + beta * C with leading dimensions lda, ldb, ldc.
void cpu_sgemm(Transpose ta, Transpose tb, std::int64_t m, std::int64_t n, std::int64_t k,
               float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
               float beta, float* c, std::int64_t ldc);

}  // namespace dit
