// LoRA adapters of the block linears (see lora.h).
#include "layers/lora.h"

#include <array>

namespace dit {

namespace {
// The block linears that get an adapter, by the suffix of their weight's name.
constexpr std::array<const char*, 7> kAdapted = {".attn.qkv.weight", ".attn.proj.weight", ".mlp.fc1.weight",
                                                 ".mlp.fc2.weight",  ".mlp.w12.weight",   ".mlp.w3.weight",
                                                 ".adaLN_modulation.1.weight"};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

std::vector<ParamSpec> declare_lora(const std::vector<ParamSpec>& model, int rank) {
  DIT_CHECK(rank > 0, "LoRA rank ", rank, ": expected a positive rank");
  std::vector<ParamSpec> out;
  for (const ParamSpec& w : model) {
    if (w.name.rfind("blocks.", 0) != 0) continue;
    bool adapted = false;
    for (const char* suffix : kAdapted) adapted = adapted || ends_with(w.name, suffix);
    if (!adapted) continue;
    DIT_CHECK(w.global.rank == 2, w.name, ": LoRA expects a 2-d weight");
    const std::string base = w.name.substr(0, w.name.size() - std::string(".weight").size());
    const std::int64_t o = w.global[0], i = w.global[1], r = rank;
    // A column-parallel W splits B's rows as its own (with its row groups); a row-parallel W
    // splits A's columns. The other factor is whole on every rank.
    const bool column = w.split == Split::Column;
    out.push_back({base + ".lora_a", {r, i}, column ? Split::Replicated : Split::Row, 1, Init::KaimingUniform});
    out.push_back({base + ".lora_b", {o, r}, column ? Split::Column : Split::Replicated, column ? w.groups : 1,
                   Init::Zero});
  }
  return out;
}

LoraAdapter lora_adapter(const ParamSet& lora, const std::string& prefix, float scale, const Tensor& t,
                         const Tensor& u) {
  const int a = lora.index(prefix + ".lora_a");
  if (a < 0) return {};
  const int b = lora.index(prefix + ".lora_b");
  return {lora.value(a), lora.value(b), lora.grad(a), lora.grad(b), scale, t, u};
}

}  // namespace dit
