// bf16/fp16 storage over the fp32 CPU kernels (see storage_backend.h).
#include "backend/cpu/storage_backend.h"

#include <vector>

namespace dit {

namespace {

// The fp32 operands of one primitive. in() and out() return fp32 views of 16-bit tensors (fp32
// and int32 tensors pass through untouched); commit() rounds the outputs back into their storage.
// Views of the same memory share one fp32 copy, so two chunks of one modulation tensor written by
// one call both land. Outputs are widened first too: a call may write only part of a tensor, or
// accumulate into it.
class Widened {
 public:
  Tensor in(const Tensor& t) { return widen(t, false); }
  Tensor out(const Tensor& t) { return widen(t, true); }
  ModChunk in(const ModChunk& m) { return {in(m.mod), m.index}; }
  ModChunk out(const ModChunk& m) { return {out(m.mod), m.index}; }

  void commit() {
    for (Entry& e : entries_) {
      if (!e.written) continue;
      for (std::int64_t i = 0; i < e.numel; ++i) store_from_f32(e.data, e.dtype, i, e.f32[i]);
    }
  }

 private:
  struct Entry {
    void* data;
    DType dtype;
    std::int64_t numel;
    std::vector<float> f32;
    bool written;
  };

  Tensor widen(const Tensor& t, bool written) {
    DIT_CHECK(t.device == Device::Host, "the CPU backend works on host tensors only");
    if (t.dtype == DType::F32 || t.dtype == DType::I32) return t;
    const char* lo = static_cast<const char*>(t.data);
    for (Entry& e : entries_) {
      if (e.data == t.data && e.numel == t.numel()) {
        e.written = e.written || written;
        return Tensor{e.f32.data(), DType::F32, t.shape, Device::Host};
      }
      const char* elo = static_cast<const char*>(e.data);
      const bool overlap = lo < elo + e.numel * 2 && elo < lo + t.bytes();
      DIT_CHECK(!overlap, "the CPU storage backend: two operands of one call partly overlap");
    }
    Entry e{t.data, t.dtype, t.numel(), std::vector<float>(static_cast<std::size_t>(t.numel())), written};
    for (std::int64_t i = 0; i < e.numel; ++i) e.f32[i] = load_as_f32(t.data, t.dtype, i);
    entries_.push_back(std::move(e));  // the vector's buffer keeps its address
    return Tensor{entries_.back().f32.data(), DType::F32, t.shape, Device::Host};
  }

  std::vector<Entry> entries_;
};

}  // namespace

CpuStorageBackend::CpuStorageBackend(DType storage) : storage_(storage) {
  DIT_CHECK(storage == DType::BF16 || storage == DType::F16,
            "the CPU storage backend stores bf16 or fp16, not ", dtype_name(storage));
}

void CpuStorageBackend::fill(const Tensor& t, float value) {
  Widened w;
  fp32_.fill(w.out(t), value);
  w.commit();
}

void CpuStorageBackend::gemm(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb,
                             const Tensor& c, Accumulate acc, float alpha) {
  Widened w;
  fp32_.gemm(w.in(a), ta, w.in(b), tb, w.out(c), acc, alpha);
  w.commit();
}

void CpuStorageBackend::add_rowwise(const Tensor& y, const Tensor& v) {
  Widened w;
  fp32_.add_rowwise(w.out(y), w.in(v));
  w.commit();
}

void CpuStorageBackend::sum_rows(const Tensor& x, const Tensor& out, Accumulate acc) {
  Widened w;
  fp32_.sum_rows(w.in(x), w.out(out), acc);
  w.commit();
}

void CpuStorageBackend::transpose_01(const Tensor& src, const Tensor& dst) {
  Widened w;
  fp32_.transpose_01(w.in(src), w.out(dst));
  w.commit();
}

void CpuStorageBackend::axpy(float alpha, const Tensor& x, const Tensor& y) {
  Widened w;
  fp32_.axpy(alpha, w.in(x), w.out(y));
  w.commit();
}

void CpuStorageBackend::scale(const Tensor& x, float alpha) {
  Widened w;
  fp32_.scale(w.out(x), alpha);
  w.commit();
}

double CpuStorageBackend::sum_squares(const Tensor& x) {
  Widened w;
  return fp32_.sum_squares(w.in(x));
}

void CpuStorageBackend::gelu_tanh_fwd(const Tensor& x, const Tensor& y) {
  Widened w;
  fp32_.gelu_tanh_fwd(w.in(x), w.out(y));
  w.commit();
}

void CpuStorageBackend::gelu_tanh_bwd(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  Widened w;
  fp32_.gelu_tanh_bwd(w.in(x), w.in(dy), w.out(dx));
  w.commit();
}

void CpuStorageBackend::silu_fwd(const Tensor& x, const Tensor& y) {
  Widened w;
  fp32_.silu_fwd(w.in(x), w.out(y));
  w.commit();
}

void CpuStorageBackend::silu_bwd(const Tensor& x, const Tensor& dy, const Tensor& dx,
                                 Accumulate acc) {
  Widened w;
  fp32_.silu_bwd(w.in(x), w.in(dy), w.out(dx), acc);
  w.commit();
}

void CpuStorageBackend::relu_fwd(const Tensor& x, const Tensor& y) {
  Widened w;
  fp32_.relu_fwd(w.in(x), w.out(y));
  w.commit();
}

void CpuStorageBackend::ln_modulate_fwd(const Tensor& x, const ModChunk& shift,
                                        const ModChunk& scale, float eps, const Tensor& y,
                                        const Tensor& mean, const Tensor& rstd) {
  Widened w;
  fp32_.ln_modulate_fwd(w.in(x), w.in(shift), w.in(scale), eps, w.out(y), w.out(mean), w.out(rstd));
  w.commit();
}

void CpuStorageBackend::ln_modulate_bwd(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                        const Tensor& rstd, const ModChunk& scale, const Tensor& dx,
                                        Accumulate acc, const ModChunk& dshift,
                                        const ModChunk& dscale) {
  Widened w;
  fp32_.ln_modulate_bwd(w.in(dy), w.in(x), w.in(mean), w.in(rstd), w.in(scale), w.out(dx), acc,
                        w.out(dshift), w.out(dscale));
  w.commit();
}

void CpuStorageBackend::swiglu_fwd(const Tensor& x12, const Tensor& h) {
  Widened w;
  fp32_.swiglu_fwd(w.in(x12), w.out(h));
  w.commit();
}

void CpuStorageBackend::swiglu_bwd(const Tensor& x12, const Tensor& dh, const Tensor& dx12) {
  Widened w;
  fp32_.swiglu_bwd(w.in(x12), w.in(dh), w.out(dx12));
  w.commit();
}

namespace {
// An optional operand (no data) stays without data.
Tensor widen_optional(Widened& w, const Tensor& t, bool written) {
  if (t.data == nullptr) return t;
  return written ? w.out(t) : w.in(t);
}
}  // namespace

void CpuStorageBackend::rms_modulate_fwd(const Tensor& x, const Tensor& weight,
                                         const ModChunk& shift, const ModChunk& scale, float eps,
                                         const Tensor& y, const Tensor& rstd) {
  Widened w;
  fp32_.rms_modulate_fwd(w.in(x), widen_optional(w, weight, false), w.in(shift), w.in(scale), eps,
                         w.out(y), w.out(rstd));
  w.commit();
}

void CpuStorageBackend::rms_modulate_bwd(const Tensor& dy, const Tensor& x, const Tensor& rstd,
                                         const Tensor& weight, const ModChunk& scale,
                                         const Tensor& dx, Accumulate acc, const Tensor& dweight,
                                         const ModChunk& dshift, const ModChunk& dscale) {
  Widened w;
  fp32_.rms_modulate_bwd(w.in(dy), w.in(x), w.in(rstd), widen_optional(w, weight, false),
                         w.in(scale), w.out(dx), acc, widen_optional(w, dweight, true),
                         w.out(dshift), w.out(dscale));
  w.commit();
}

void CpuStorageBackend::head_norm_fwd(const Tensor& qkv, int heads, const HeadNorm& p,
                                      const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  Widened w;
  HeadNorm p32 = p;
  p32.q_w = w.in(p.q_w), p32.k_w = w.in(p.k_w);
  p32.q_b = widen_optional(w, p.q_b, false), p32.k_b = widen_optional(w, p.k_b, false);
  fp32_.head_norm_fwd(w.in(qkv), heads, p32, w.out(out), w.out(mean), w.out(rstd));
  w.commit();
}

void CpuStorageBackend::head_norm_bwd(const Tensor& dout, const Tensor& qkv, const Tensor& mean,
                                      const Tensor& rstd, int heads, const HeadNorm& p,
                                      const HeadNormGrads& g, const Tensor& dqkv) {
  Widened w;
  HeadNorm p32 = p;
  p32.q_w = w.in(p.q_w), p32.k_w = w.in(p.k_w);
  p32.q_b = widen_optional(w, p.q_b, false), p32.k_b = widen_optional(w, p.k_b, false);
  HeadNormGrads g32{w.out(g.q_w), widen_optional(w, g.q_b, true), w.out(g.k_w),
                    widen_optional(w, g.k_b, true)};
  fp32_.head_norm_bwd(w.in(dout), w.in(qkv), w.in(mean), w.in(rstd), heads, p32, g32, w.out(dqkv));
  w.commit();
}

void CpuStorageBackend::rope_fwd(const Tensor& qkv, int heads, int grid, const Tensor& out) {
  Widened w;
  fp32_.rope_fwd(w.in(qkv), heads, grid, w.out(out));
  w.commit();
}

void CpuStorageBackend::rope_bwd(const Tensor& dout, int heads, int grid, const Tensor& dqkv) {
  Widened w;
  fp32_.rope_bwd(w.in(dout), heads, grid, w.out(dqkv));
  w.commit();
}

void CpuStorageBackend::gate_residual_fwd(const Tensor& x, const Tensor& h, const ModChunk& gate) {
  Widened w;
  fp32_.gate_residual_fwd(w.out(x), w.in(h), w.in(gate));
  w.commit();
}

void CpuStorageBackend::gate_residual_bwd(const Tensor& dx, const Tensor& h, const ModChunk& gate,
                                          const Tensor& dh, const ModChunk& dgate) {
  Widened w;
  fp32_.gate_residual_bwd(w.in(dx), w.in(h), w.in(gate), w.out(dh), w.out(dgate));
  w.commit();
}

std::size_t CpuStorageBackend::workspace_bytes() const {
  return composed_ ? composed_->workspace_bytes() : 0;
}

std::string CpuStorageBackend::attention_note() const {
  return attention_path_ == AttentionPath::Composed ? "composed attention (DIT_ATTENTION=composed)" : "";
}

// The composed attention runs over this backend's primitives, so its P and dS are rounded to the
// storage dtype between the GEMMs, as on the GPU.
ComposedAttention* CpuStorageBackend::composed() {
  if (attention_path_ != AttentionPath::Composed) return nullptr;
  if (!composed_) composed_ = std::make_unique<ComposedAttention>(*this);
  return composed_.get();
}

void CpuStorageBackend::attention_fwd(const Tensor& qkv, int heads, const Tensor& out,
                                      const Tensor& lse) {
  if (ComposedAttention* c = composed()) return c->forward(*this, qkv, heads, out, lse);
  Widened w;
  fp32_.attention_fwd(w.in(qkv), heads, w.out(out), w.out(lse));
  w.commit();
}

void CpuStorageBackend::attention_bwd(const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                      const Tensor& dout, int heads, const Tensor& dqkv) {
  if (ComposedAttention* c = composed()) return c->backward(*this, qkv, out, lse, dout, heads, dqkv);
  Widened w;
  fp32_.attention_bwd(w.in(qkv), w.in(out), w.in(lse), w.in(dout), heads, w.out(dqkv));
  w.commit();
}

void CpuStorageBackend::softmax_rows(const Tensor& s, const Tensor& p, const Tensor& lse,
                                     SoftmaxStats stats) {
  Widened w;
  fp32_.softmax_rows(w.in(s), w.out(p), stats == SoftmaxStats::Compute ? w.out(lse) : w.in(lse), stats);
  w.commit();
}

void CpuStorageBackend::softmax_rows_bwd(const Tensor& p, const Tensor& dp, const Tensor& delta,
                                         const Tensor& ds) {
  Widened w;
  fp32_.softmax_rows_bwd(w.in(p), w.in(dp), w.in(delta), w.out(ds));
  w.commit();
}

void CpuStorageBackend::row_dot(const Tensor& a, const Tensor& b, const Tensor& out) {
  Widened w;
  fp32_.row_dot(w.in(a), w.in(b), w.out(out));
  w.commit();
}

void CpuStorageBackend::conv2d_fwd(const Tensor& x, const Tensor& wt, const Tensor& bias,
                                   const ConvGeometry& g, const Tensor& y, Accumulate acc) {
  Widened w;
  fp32_.conv2d_fwd(w.in(x), w.in(wt), widen_optional(w, bias, false), g, w.out(y), acc);
  w.commit();
}

void CpuStorageBackend::group_norm_fwd(const Tensor& x, int groups, const Tensor& gamma,
                                       const Tensor& beta, float eps, bool silu, const Tensor& y) {
  Widened w;
  fp32_.group_norm_fwd(w.in(x), groups, w.in(gamma), w.in(beta), eps, silu, w.out(y));
  w.commit();
}

void CpuStorageBackend::upsample_nearest2x(const Tensor& x, const Tensor& y) {
  Widened w;
  fp32_.upsample_nearest2x(w.in(x), w.out(y));
  w.commit();
}

void CpuStorageBackend::pool2d_fwd(const Tensor& x, const PoolGeometry& g, PoolKind kind, const Tensor& y) {
  Widened w;
  fp32_.pool2d_fwd(w.in(x), g, kind, w.out(y));
  w.commit();
}

void CpuStorageBackend::resize_bilinear(const Tensor& x, const Tensor& y) {
  Widened w;
  fp32_.resize_bilinear(w.in(x), w.out(y));
  w.commit();
}

void CpuStorageBackend::copy_channels(const Tensor& src, const Tensor& dst, std::int64_t channel_offset) {
  Widened w;
  fp32_.copy_channels(w.in(src), w.out(dst), channel_offset);
  w.commit();
}

void CpuStorageBackend::embedding_fwd(const Tensor& table, const Tensor& ids, const Tensor& out) {
  Widened w;
  fp32_.embedding_fwd(w.in(table), ids, w.out(out));
  w.commit();
}

void CpuStorageBackend::embedding_bwd(const Tensor& dout, const Tensor& ids, const Tensor& dtable) {
  Widened w;
  fp32_.embedding_bwd(w.in(dout), ids, w.out(dtable));
  w.commit();
}

void CpuStorageBackend::timestep_embedding(const Tensor& t, float max_period, const Tensor& out) {
  Widened w;
  fp32_.timestep_embedding(w.in(t), max_period, w.out(out));
  w.commit();
}

void CpuStorageBackend::patchify(const Tensor& img, int p, PatchOrder order, const Tensor& patches) {
  Widened w;
  fp32_.patchify(w.in(img), p, order, w.out(patches));
  w.commit();
}

void CpuStorageBackend::unpatchify(const Tensor& patches, int p, PatchOrder order,
                                   const Tensor& img) {
  Widened w;
  fp32_.unpatchify(w.in(patches), p, order, w.out(img));
  w.commit();
}

void CpuStorageBackend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                                   const Tensor& exp_avg_sq, const math::AdamWParams& h) {
  Widened w;
  fp32_.adamw_step(w.out(param), w.in(grad), w.out(exp_avg), w.out(exp_avg_sq), h);
  w.commit();
}

void CpuStorageBackend::ema_step(const Tensor& ema, const Tensor& param, float decay) {
  Widened w;
  fp32_.ema_step(w.out(ema), w.in(param), decay);
  w.commit();
}

void CpuStorageBackend::adamw_ema_step(const Tensor& master, const Tensor& grad,
                                       const Tensor& exp_avg, const Tensor& exp_avg_sq,
                                       const Tensor& ema, const Tensor& param,
                                       const math::AdamWParams& h, float decay) {
  Widened w;
  fp32_.adamw_ema_step(w.out(master), w.in(grad), w.out(exp_avg), w.out(exp_avg_sq), w.out(ema),
                       param.data ? w.out(param) : param, h, decay);
  w.commit();
}

double CpuStorageBackend::sum_squares_ranges(const Tensor& x, const Tensor& ranges) {
  Widened w;
  return fp32_.sum_squares_ranges(w.in(x), ranges);
}

void CpuStorageBackend::philox_normal(std::uint64_t seed, std::uint32_t purpose, std::uint64_t step,
                                      std::uint64_t first, const Tensor& noise) {
  Widened w;
  fp32_.philox_normal(seed, purpose, step, first, w.out(noise));
  w.commit();
}

void CpuStorageBackend::q_sample(const Tensor& x0, const Tensor& noise, const Tensor& t,
                                 const Tensor& coefs, const Tensor& x_t) {
  Widened w;
  fp32_.q_sample(w.in(x0), w.in(noise), t, w.in(coefs), w.out(x_t));
  w.commit();
}

void CpuStorageBackend::sample_loss(const math::SampleLoss& loss, const LossTensors& io) {
  Widened w;
  const auto in = [&w](const Tensor& t) { return t.data ? w.in(t) : t; };
  fp32_.sample_loss(loss, {.a = in(io.a), .b = in(io.b), .grad = w.out(io.grad), .x0 = in(io.x0),
                           .noise = in(io.noise), .t = io.t, .coefs = in(io.coefs), .terms = w.out(io.terms)});
  w.commit();
}

}  // namespace dit
