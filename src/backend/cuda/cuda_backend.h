// The CUDA backend: every Backend primitive as a kernel or a cuBLASLt call on one stream of one
// GPU. Activations and params in the compute dtype (fp32, bf16 or fp16), fp32 accumulation and
// statistics. Host code includes this header without the CUDA headers (the handles are opaque).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "backend/attention_path.h"
#include "backend/backend.h"
#include "backend/upload_ring.h"

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

namespace dit {

namespace cuda {
struct GemmContext;        // cuBLASLt/cuBLAS handles, workspace and plan cache (gemm.cu)
class CudnnAttention;      // cuDNN fused attention: handle, plans, fallbacks (cudnn_attention.h)
}  // namespace cuda
class ComposedAttention;   // attention over this backend's GEMMs and row kernels

class CudaBackend final : public Backend {
 public:
  // `device` < 0 keeps the calling thread's current device (whoever maps ranks to GPUs sets it).
  explicit CudaBackend(DType compute = DType::F32, int device = -1);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda"; }
  DType compute_dtype() const override { return compute_; }
  Device device() const override { return Device::Cuda; }
  void* allocate(std::size_t bytes) override;
  void deallocate(void* p) override;
  // Waits for the stream, then reports any fault a kernel flagged (bad ids) as an Error.
  void synchronize() override;

  // The stream every primitive is issued on (for NCCL and other collaborators).
  cudaStream_t stream() const { return stream_; }
  int device_index() const { return device_; }
  // Which implementation attention_fwd/bwd use; the default comes from DIT_ATTENTION (see
  // attention_path.h): cuDNN where it serves, else the composed attention. For tests and
  // benchmarks that compare them.
  void set_attention_path(AttentionPath path);
  std::size_t workspace_bytes() const override;
  std::string attention_note() const override;
  bool device_memory(std::size_t* free, std::size_t* total) const override;
  void set_deterministic(bool d) override;
  void reserve_uploads(std::size_t bytes_per_step) override;
  std::size_t mark() override;  // a CUDA event recorded on the stream
  double seconds_between(std::size_t a, std::size_t b) override;
  void clear_marks() override { next_event_ = 0; }

  void copy(const Tensor& dst, const Tensor& src) override;
  void fill(const Tensor& t, float value) override;

  void gemm(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, const Tensor& c,
            Accumulate acc, float alpha) override;
  void gemm_bias(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, const Tensor& bias,
                 const Tensor& c) override;
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

 private:
  // Device scratch for one primitive at a time (staging of converting copies, reduction
  // partials, attention row terms). Grows rarely (synchronizing then); stream order makes reuse
  // by the next primitive safe. Valid until the next call of scratch().
  void* scratch(std::size_t bytes);
  void check_fault_flag();
  // The sum of `count` device partial sums, returned on the host (synchronizes).
  double sum_on_host(const double* partial, int count);
  // A host-to-device copy through the pinned upload ring (upload_ring.h): asynchronous; the host
  // waits (a counted sync) only for an old copy whose ring bytes it must reuse.
  void upload(const Tensor& dst, const Tensor& src);
  void make_upload_ring(std::size_t bytes);
  void wait_upload_slot(int slot);

  DType compute_;
  int device_ = 0;
  int num_sms_ = 1;
  bool stream_ordered_ = false;  // device memory from the stream-ordered pool (cudaMallocAsync)
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
  std::size_t scratch_bytes_ = 0;
  // Host-mapped (zero-copy) words: kernels raise fault_ on bad input; sum_squares lands in
  // result_ without a separate copy.
  int* fault_host_ = nullptr;
  int* fault_dev_ = nullptr;
  double* result_host_ = nullptr;
  double* result_dev_ = nullptr;
  char* pinned_ = nullptr;  // the upload ring's bytes (page-locked host memory)
  std::unique_ptr<UploadRing> ring_;
  std::vector<cudaEvent_t> ring_events_;  // one per ring slot: its copy has completed
  std::vector<cudaEvent_t> timeline_events_;  // mark()'s events, reused after clear_marks()
  std::size_t next_event_ = 0;
  std::unique_ptr<cuda::GemmContext> gemm_;
  std::unique_ptr<cuda::CudnnAttention> cudnn_attention_;  // its cuDNN handle comes on first use
  std::unique_ptr<ComposedAttention> composed_;  // where cuDNN does not serve (and fp32)
};

}  // namespace dit
