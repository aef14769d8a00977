// LoRA adapters on the blocks' linear layers (layers/linear.h has the math and the tp split), as
// TinyFusion's learned pruning trains them beside its gates: every block linear (qkv, proj, the
// MLP's two, adaLN's modulation) gets A (r, in), Kaiming-uniform, and B (out, r), zero, so the
// model starts as the base. They live in their own ParamSet, next to the model's, named after
// the base weight ("blocks.3.attn.qkv.lora_a"), so every layout draws the same values.
#pragma once

#include <string>
#include <vector>

#include "layers/linear.h"
#include "layers/params.h"

namespace dit {

// Learned pruning's low-rank updates (dit_mp prune --method learned --lora R): the base weights
// stay, the adapters train at `lr` (AdamW, no weight decay) beside the gates.
struct LoraSettings {
  int rank = 0;       // 0: none
  double alpha = 0;   // 0: 2 x rank (TinyFusion's), so scale = alpha / rank = 2
  double lr = 1e-4;
  bool enabled() const { return rank > 0; }
  float scale() const { return static_cast<float>((alpha > 0 ? alpha : 2.0 * rank) / rank); }
};

// The adapters of the block linears among `model` (a stage's ParamSpecs), rank r each.
std::vector<ParamSpec> declare_lora(const std::vector<ParamSpec>& model, int rank);
// Whether a LoRA tensor's gradient is a partial sum over tp (the factor every rank holds whole).
inline bool lora_grad_is_tp_partial(const ParamSpec& s) { return s.split == Split::Replicated; }
// The adapter of the linear `prefix` ("blocks.3.attn.qkv") with scale s and the shared scratch t, u,
// or none when `lora` has none.
LoraAdapter lora_adapter(const ParamSet& lora, const std::string& prefix, float scale, const Tensor& t,
                         const Tensor& u);

}  // namespace dit
