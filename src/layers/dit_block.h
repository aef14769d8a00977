// One DiT block with adaLN-Zero conditioning (Peebles & Xie 2023, Fig. 3), tensor-parallel:
//   shift1, scale1, gate1, shift2, scale2, gate2 = adaLN(SiLU(c))           (N, 6D)
//   x = x + gate1 * proj(attn(qkv(LN(x) * (1 + scale1) + shift1)))
//   x = x + gate2 * fc2(gelu(fc1(LN(x) * (1 + scale2) + shift2)))
// with LightningDiT's variants (DiTConfig): model.norm = rmsnorm replaces both LNs by RMSNorm with
// a weight (norm1, norm2); model.mlp = swiglu replaces fc2(gelu(fc1(h))) by w3(SiLU(x1) * x2),
// [x1 | x2] = w12(h); model.qk_norm normalizes each head of q and k (q_norm, k_norm: RMSNorm, or
// LayerNorm with eps 1e-5, both with weights); model.pos_embed = rope rotates q and k (after
// their norm) by the 2-D axial rotary embedding. Parameter names are the reference's.
// qkv and fc1 are column-parallel (a rank owns H/tp heads and M/tp hidden units), proj and fc2
// row-parallel (forward all-reduce, bias added once after), adaLN column-parallel with an
// all-gather of its small (N, 6D) output. w12 is column-parallel in two groups, as qkv in three:
// a rank holds rows [r F/tp, (r+1) F/tp) of both x1 and x2, so its gate needs no communication;
// w3 is row-parallel. q/k norm and RoPE act per head inside a rank's heads; the q/k norm weights
// are replicated, so their gradients (partial over heads) are summed over tp, as are the RMSNorm
// weights' under sequence parallelism (partial over tokens).
//
// Activation recomputation (a block's Recompute mode) decides what the forward keeps for the
// backward; the backward first rematerializes what was dropped with the same kernels in the same
// order, so the numbers are bit-identical to keeping everything:
//   None       keeps every tensor of BlockActs.
//   Selective  keeps the GEMM and attention outputs (qkv, attn, lse, o1, f1, o2) and the small mod;
//              drops the cheap, large elementwise tensors (LN/RMSNorm + modulate outputs h1, h2
//              with their statistics, x_mid, the GELU or SwiGLU gate output g1, and q/k after
//              their norm and rotation, qkv_a, with the q/k norm statistics) and recomputes them.
//              w12's output is a GEMM output (f1) and is kept.
//   Full       keeps only x_out (the next block's input; x_in is the previous block's) and reruns
//              the whole forward, collectives included, inside the backward.
//
// Split backward (zero-bubble schedules): with a deferring WeightSink (linear.h) the backward is
// B: it computes dL/dx_in and dL/dSiLU(c), with every tp collective, the q/k norm and RMSNorm
// weight grads (their tp sums are collectives), and queues the five linears' dW, db for the W
// pass. What the queue reads lives until W (dit_block.cpp lists it).
//
// Sequence parallelism (Tokens::SequenceParallel, tp > 1): the residual stream and everything
// token-wise outside the tp GEMMs (x_in, x_mid, x_out, o1, o2, LN statistics) hold this rank's T/tp
// tokens; h1 and h2 are all-gathered to every token before qkv and fc1, and the partial outputs
// of proj and fc2 are reduce-scattered instead of all-reduced (parallel/sequence_parallel.h). The
// adaLN gradient dmod is then a sum over this rank's tokens only, so it is reduce-scattered into
// this rank's adaLN columns.
#pragma once

#include "backend/backend.h"
#include "layers/dit_config.h"
#include "layers/linear.h"
#include "layers/norm.h"
#include "parallel/comm.h"
#include "core/named.h"

namespace dit {

enum class Recompute : std::uint8_t { None, Selective, Full };
inline constexpr Named<Recompute> kRecomputeNames[] = {
    {Recompute::None, "none"}, {Recompute::Selective, "selective"}, {Recompute::Full, "full"}};
enum class Tokens : std::uint8_t { Replicated, SequenceParallel };
Recompute parse_recompute(const std::string& name);  // "none" | "selective" | "full"
std::string recompute_name(Recompute r);

// Activations one block keeps for its backward, for one microbatch. Tensors the block's Recompute
// mode drops are views into scratch that is gone by the backward.
struct BlockActs {
  Recompute kept = Recompute::None;  // which tensors are valid (see the modes above)
  // T below is this rank's token count: all tokens, or T/tp under sequence parallelism; Tf is all
  // tokens either way.
  Tensor x_in;          // (N, T, D) residual stream entering the block (owned upstream)
  Tensor mod;           // (N, 6D)   adaLN output, all tp columns
  Tensor mean1, rstd1;  // (N*T)     LayerNorm statistics before attention
  Tensor h1;            // (N, Tf, D) modulated norm, input of qkv
  Tensor qkv;           // (N, Tf, 3D/tp) qkv's output
  Tensor qkv_a;         // (N, Tf, 3D/tp) attention's input: qkv after q/k norm and RoPE (or qkv)
  Tensor qk_mean, qk_rstd;  // (N*Tf, 2, H/tp) q/k norm statistics
  Tensor attn;          // (N, Tf, D/tp) attention output of this rank's heads
  Tensor lse;           // (N, H/tp, Tf) row logsumexp of the attention scores
  Tensor o1;            // (N, T, D) attention branch output before the gate
  Tensor x_mid;         // (N, T, D) residual stream after attention
  Tensor mean2, rstd2;  // (N*T)
  Tensor h2;            // (N, Tf, D) modulated norm, input of fc1
  Tensor f1;            // (N, Tf, M/tp) fc1 output before GELU (swiglu: w12's (N, Tf, 2F/tp))
  Tensor g1;            // (N, Tf, M/tp) GELU output, input of fc2 (swiglu: the gate, F/tp)
  Tensor o2;            // (N, T, D) MLP branch output before the gate
  Tensor x_out;         // (N, T, D) residual stream leaving the block
};

class DiTBlock {
 public:
  DiTBlock(const DiTConfig& cfg, const ParamSet& ps, int index, Comm& tp,
           Tokens tokens = Tokens::Replicated);
  static void declare(const DiTConfig& cfg, int index, std::vector<ParamSpec>& specs);
  // Attaches the LoRA adapters `lora` holds for this block's linears (layers/lora.h), scale s,
  // scratch t and u of (max_rows, r).
  void attach_lora(const ParamSet& lora, float scale, const Tensor& t, const Tensor& u);

  // silu_c (N, D) = SiLU(c), computed once per stage and shared by its blocks.
  // What the mode keeps goes to `saved`, the rest to `scratch`.
  BlockActs forward(Backend& be, const Tensor& x_in, const Tensor& silu_c, Arena& saved,
                    Arena& scratch, Recompute mode = Recompute::None) const;
  // dx: on entry dL/dx_out, on exit dL/dx_in (updated in place: the residual stream).
  // dsilu_c (N, D) += this rank's partial dL/dSiLU(c); the stage all-reduces it over tp once.
  // `w`: where the linears' weight grads go (default: added at once, the fused backward).
  void backward(Backend& be, const BlockActs& kept, const Tensor& silu_c, const Tensor& dx,
                const Tensor& dsilu_c, Arena& scratch, const WeightSink& w = {}) const;

 private:
  Tensor adaln_forward(Backend& be, const Tensor& silu_c, Arena& saved, Arena& scratch) const;
  // Every tensor of `kept` valid again: dropped ones recomputed into `into` (temporaries in scratch).
  BlockActs rematerialize(Backend& be, const BlockActs& kept, const Tensor& silu_c, Arena& into,
                          Arena& scratch) const;
  // The cheap elementwise steps, shared by the forward and selective recomputation.
  void attn_norm(Backend& be, BlockActs& a, Arena& arena, Arena& scratch) const;  // mean1, rstd1, h1
  void attn_residual(Backend& be, BlockActs& a, Arena& arena) const;  // x_mid = x_in + gate1 o1
  void mlp_norm(Backend& be, BlockActs& a, Arena& arena, Arena& scratch) const;   // mean2, rstd2, h2
  void mlp_act(Backend& be, BlockActs& a, Arena& arena) const;        // g1 = gelu(f1) | gate
  void qk_transform(Backend& be, BlockActs& a, Arena& arena) const;   // qkv_a (+ statistics)
  // dqkv_a (attention's input grad) back through RoPE (in place) and q/k norm into dqkv.
  void qk_transform_bwd(Backend& be, const BlockActs& a, const Tensor& dqkv_a, const Tensor& dqkv,
                        Arena& scratch) const;
  // Backward of a modulated norm (LN, or RMSNorm with its weight grad; see modulated_norm).
  void modulated_norm_bwd(Backend& be, const Tensor& dh, const Tensor& x, const Tensor& mean,
                          const Tensor& rstd, const Tensor& mod, int shift, const NormWeight& w,
                          const Tensor& dx, const Tensor& dmod, Arena& scratch) const;
  HeadNorm head_norm() const;
  // h (N, Tf, D) = norm(x) * (1 + scale) + shift, all-gathered over tokens under sequence
  // parallelism; norm is LN or RMSNorm with weight w.
  void modulated_norm(Backend& be, const Tensor& x, const Tensor& mod, int shift,
                      const NormWeight& w, Arena& arena, Arena& scratch, Tensor& h, Tensor& mean,
                      Tensor& rstd) const;
  // out (N, T, D) = this rank's tokens of the tp sum of the row-parallel GEMM of `in`, + bias.
  void row_parallel_fwd(Backend& be, const LinearParams& p, const Tensor& in, const Tensor& out,
                        Arena& scratch) const;
  // The gradient of a row-parallel output on all tokens (N, Tf, D) from this rank's (N, T, D).
  // (Allocated from `into` when gathered.)
  Tensor row_parallel_dy(Backend& be, const Tensor& dy, Arena& into, Arena& scratch) const;
  // The tp sum of a column-parallel GEMM's input grad `dfull` (N, Tf, D), for this rank's tokens.
  Tensor column_parallel_dx(Backend& be, const Tensor& dfull, Arena& scratch) const;
  std::int64_t token_split() const { return sp() ? tp_->size() : 1; }
  bool sp() const { return tokens_ == Tokens::SequenceParallel; }
  void adaln_backward(Backend& be, const Tensor& silu_c, const Tensor& dmod, const Tensor& dsilu_c,
                      Arena& scratch, const WeightSink& w) const;

  DiTConfig cfg_;
  Comm* tp_;
  Tokens tokens_;
  std::string prefix_;  // "blocks.<index>"
  LinearParams qkv_, proj_, fc1_, fc2_, ada_;  // fc1_, fc2_ are w12, w3 for swiglu
  NormWeight norm1_, norm2_, q_norm_, k_norm_;  // without data where the variant is off
};

}  // namespace dit
