// Presets and validation of DiT model shapes.
#include "layers/dit_config.h"

#include <map>
#include <sstream>

#include "core/error.h"

namespace dit {

namespace {
struct Size {
  int depth, hidden, heads;
};
// The four official model sizes of Peebles & Xie (2023), Table 1; and two past them for scaling
// studies and the planner's tiers, a stated choice: DiT-XL's depth 28 at widths 2048 and 4096 with
// 128-wide heads (2.1B and 8.5B parameters at patch 2).
const std::map<std::string, Size>& sizes() {
  static const std::map<std::string, Size> s = {{"S", {12, 384, 6}},   {"B", {12, 768, 12}},
                                                {"L", {24, 1024, 16}}, {"XL", {28, 1152, 16}},
                                                {"2B", {28, 2048, 16}}, {"8B", {28, 4096, 32}}};
  return s;
}

// LightningDiT's model functions: name -> depth, hidden, heads, patch.
struct LightningSize {
  const char* name;
  int depth, hidden, heads, patch;
};
constexpr LightningSize kLightningSizes[] = {
    {"LightningDiT-B/1", 12, 768, 12, 1},      {"LightningDiT-B/2", 12, 768, 12, 2},
    {"LightningDiT-L/2", 24, 1024, 16, 2},     {"LightningDiT-XL/1", 28, 1152, 16, 1},
    {"LightningDiT-XL/2", 28, 1152, 16, 2},    {"LightningDiT-1p0B/1", 24, 1536, 24, 1},
    {"LightningDiT-1p0B/2", 24, 1536, 24, 2},  {"LightningDiT-1p6B/1", 28, 1792, 28, 1},
};
}  // namespace

std::vector<std::string> dit_preset_names() {
  std::vector<std::string> names;
  for (const char* s : {"S", "B", "L", "XL", "2B", "8B"})
    for (int p : {2, 4, 8}) names.push_back(std::string("DiT-") + s + "/" + std::to_string(p));
  for (const LightningSize& l : kLightningSizes) names.push_back(l.name);
  return names;
}

DiTConfig dit_preset(const std::string& name) {
  for (const LightningSize& l : kLightningSizes)
    if (name == l.name) {
      DiTConfig c;
      c.depth = l.depth, c.hidden_size = l.hidden, c.num_heads = l.heads, c.patch_size = l.patch;
      c.mlp = MlpKind::Swiglu, c.norm = NormKind::RmsNorm, c.pos_embed = PosEmbed::Rope;
      c.qk_norm = false, c.learn_sigma = false;
      return c;
    }
  std::string body = name.rfind("DiT-", 0) == 0 ? name.substr(4) : name;
  auto slash = body.find('/');
  auto it = sizes().end();
  int patch = 0;
  if (slash != std::string::npos) {
    it = sizes().find(body.substr(0, slash));
    const std::string p = body.substr(slash + 1);
    patch = (p == "2" || p == "4" || p == "8") ? std::stoi(p) : 0;
  }
  if (it == sizes().end() || patch == 0) {
    std::ostringstream os;
    for (auto& n : dit_preset_names()) os << " " << n;
    DIT_FAIL("unknown model preset '", name, "': expected one of", os.str());
  }
  DiTConfig c;
  c.depth = it->second.depth;
  c.hidden_size = it->second.hidden;
  c.num_heads = it->second.heads;
  c.patch_size = patch;
  return c;
}

void DiTConfig::validate() const {
  // The model's invariants, in its own words (the run configuration names the keys first,
  // io/config_validate.cpp). Every size is range-checked before any product of sizes is formed, so
  // no message ever shows an overflowed value.
  auto in_range = [](const char* what, auto v, auto most, const char* bound = "") {
    DIT_CHECK(v > 0, "the model's ", what, " ", v, " is not positive");
    DIT_CHECK(v <= most, "the model's ", what, " ", v, " is above ", *bound ? bound : "its limit", " ", most);
  };
  in_range("input size", input_size, kMaxModelSide);
  in_range("patch size", patch_size, input_size, "its input size");
  in_range("channel count", in_channels, 4096);
  in_range("hidden size", hidden_size, 65536);
  in_range("depth", depth, 4096);
  in_range("head count", num_heads, hidden_size, "its hidden size");
  in_range("MLP ratio", mlp_ratio, 64.0);
  in_range("class count", num_classes, 1 << 24);
  in_range("frequency embedding size", frequency_embedding_size, 65536);
  in_range("norm epsilon", layernorm_eps, 1.0);
  DIT_CHECK(input_size % patch_size == 0, "the model's input size ", input_size, " is not divisible by its patch size ",
            patch_size);
  DIT_CHECK(hidden_size % num_heads == 0, "the model's hidden size ", hidden_size, " is not divisible by its ",
            num_heads, " heads");
  DIT_CHECK(hidden_size % 4 == 0, "the model's hidden size ", hidden_size,
            " is not divisible by 4 (2-D sin-cos positional embedding)");
  DIT_CHECK(mlp_hidden() > 0, "the model's MLP ratio ", mlp_ratio, " gives an empty MLP");
  DIT_CHECK(ffn_hidden() > 0, "the model's SwiGLU hidden layer is empty (int(2/3 * ", mlp_hidden(), ") = 0)");
  DIT_CHECK(pos_embed != PosEmbed::Rope || head_dim() % 4 == 0, "RoPE needs a head dim divisible by 4, not ",
            head_dim(), " (the 2-D rotary embedding rotates pairs of the head's two halves)");
  DIT_CHECK(class_dropout_prob >= 0 && class_dropout_prob < 1, "the model's class dropout probability ",
            class_dropout_prob, " is outside [0, 1)");
}

long long DiTConfig::num_params() const {
  const long long d = hidden_size, m = mlp_hidden(), c = in_channels, p = patch_size;
  const long long freq = frequency_embedding_size;
  long long n = d * c * p * p + d;                 // x_embedder
  n += freq * d + d + d * d + d;                   // t_embedder
  n += (num_classes + 1) * d;                      // y_embedder (with the null class)
  const long long f = swiglu_hidden(), e = head_dim();
  const long long mlp_params = mlp == MlpKind::Swiglu ? 2 * f * d + 2 * f + d * f + d : m * d + m + d * m + d;
  const long long norm_w = norm == NormKind::RmsNorm ? d : 0;  // one weight per norm
  const long long qk = !qk_norm ? 0 : (norm == NormKind::RmsNorm ? 2 * e : 4 * e);
  long long block = 3 * d * d + 3 * d + d * d + d + qk  // attention
                    + mlp_params                        // mlp
                    + 6 * d * d + 6 * d + 2 * norm_w;    // adaLN, norm1, norm2
  n += depth * block;
  n += 2 * d * d + 2 * d + p * p * out_channels() * d + p * p * out_channels() + norm_w;  // final
  return n;
}

double DiTConfig::block_flops() const {
  // GEMMs (2 per multiply-add): qkv, proj, the MLP (fc1 + fc2 = 2M, or w12 + w3 = 3F), attention,
  // adaLN. The elementwise work of the variants (norms, gate, rotation) is not counted, as
  // LayerNorm and GELU are not.
  const double d = hidden_size, t = num_patches();
  const double mlp_width = mlp == MlpKind::Swiglu ? 3.0 * swiglu_hidden() : 2.0 * mlp_hidden();
  return 2 * t * d * (3 * d + d + mlp_width) + 4 * t * t * d + 2 * 6 * d * d;
}

double DiTConfig::embed_flops() const {
  return 2.0 * num_patches() * hidden_size * in_channels * patch_size * patch_size;
}

double DiTConfig::final_flops() const {
  const double d = hidden_size;
  return 2 * num_patches() * d * patch_size * patch_size * out_channels() + 2 * 2 * d * d;
}

double DiTConfig::forward_flops() const { return depth * block_flops() + embed_flops() + final_flops(); }

}  // namespace dit
