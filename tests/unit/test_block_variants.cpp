// The model shape of LightningDiT's block variants: parameter counts and FLOPs of DiTConfig agree
// with the tensors the layers declare, SwiGLU's width rounds as the reference does, the
// LightningDiT presets carry the reference's sizes, and bad variants are refused naming the key.
#include <gtest/gtest.h>

#include "layers/dit_stage.h"

namespace dit {
namespace {

long long declared(const DiTConfig& c) {
  long long n = 0;
  for (const ParamSpec& s : DiTStage::declare(c, StageLayout::whole(c))) n += s.global.numel();
  return n;
}

TEST(BlockVariants, ParameterCountsMatchTheDeclaredTensors) {
  for (MlpKind mlp : {MlpKind::Gelu, MlpKind::Swiglu})
    for (NormKind norm : {NormKind::LayerNorm, NormKind::RmsNorm})
      for (bool qk : {false, true})
        for (PosEmbed pos : {PosEmbed::Sincos, PosEmbed::Rope}) {
          DiTConfig c;
          c.input_size = 8, c.patch_size = 2, c.in_channels = 4, c.hidden_size = 32, c.depth = 3;
          c.num_heads = 4, c.num_classes = 10, c.mlp_ratio = 3.0;
          c.mlp = mlp, c.norm = norm, c.qk_norm = qk, c.pos_embed = pos;
          c.validate();
          EXPECT_EQ(c.num_params(), declared(c))
              << name_of(kMlpNames, mlp) << " " << name_of(kNormNames, norm) << " qk " << qk;
        }
}

TEST(BlockVariants, SwigluWidthRoundsAsTheReference) {
  DiTConfig c = dit_preset("LightningDiT-XL/2");
  EXPECT_EQ(c.mlp_hidden(), 4608);
  EXPECT_EQ(c.swiglu_hidden(), 3072);  // int(2/3 * 4608)
  c.hidden_size = 64, c.num_heads = 4;
  EXPECT_EQ(c.swiglu_hidden(), 170);   // int(2/3 * 256) = int(170.67)
  c.hidden_size = 16, c.mlp_ratio = 3.0;
  EXPECT_EQ(c.swiglu_hidden(), 32);    // 2/3 * 48 = 32.0 in double, as in Python
}

TEST(BlockVariants, FlopsCountTheSwigluGemms) {
  DiTConfig g = dit_preset("DiT-XL/2");
  DiTConfig s = g;
  s.mlp = MlpKind::Swiglu;
  const double d = g.hidden_size, t = g.num_patches();
  // fc1 + fc2 = 2 x (D x 4D); w12 + w3 = 3 x (D x F), F = int(2/3 * 4D)
  EXPECT_DOUBLE_EQ(s.block_flops() - g.block_flops(),
                   2 * t * d * (3.0 * s.swiglu_hidden() - 2.0 * g.mlp_hidden()));
}

TEST(BlockVariants, LightningPresets) {
  const DiTConfig b = dit_preset("LightningDiT-B/2");
  EXPECT_EQ(b.depth, 12);
  EXPECT_EQ(b.hidden_size, 768);
  EXPECT_EQ(b.num_heads, 12);
  EXPECT_EQ(b.patch_size, 2);
  EXPECT_EQ(b.mlp, MlpKind::Swiglu);
  EXPECT_EQ(b.norm, NormKind::RmsNorm);
  EXPECT_EQ(b.pos_embed, PosEmbed::Rope);
  EXPECT_FALSE(b.qk_norm);
  EXPECT_FALSE(b.learn_sigma);
  EXPECT_EQ(dit_preset("LightningDiT-1p6B/1").hidden_size, 1792);
  EXPECT_EQ(dit_preset("DiT-B/2").mlp, MlpKind::Gelu);
}

TEST(BlockVariants, RopeRefusesAHeadDimItCannotRotate) {
  DiTConfig c;
  c.pos_embed = PosEmbed::Rope;
  c.hidden_size = 96, c.num_heads = 16;  // head dim 6
  try {
    c.validate();
    FAIL() << "accepted rope with head dim 6";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("RoPE needs a head dim divisible by 4, not 6"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dit
