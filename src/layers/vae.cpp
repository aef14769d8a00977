// The KL autoencoder's forward passes (see vae.h). Each block allocates its output from the arena,
// then its temporaries after a mark that it rewinds on return, so a block's intermediate tensors
// are reused by the next; block outputs stay until the pass ends.
#include "layers/vae.h"

#include <algorithm>
#include <sstream>

#include "backend/attention_path.h"
#include "backend/virtual/virtual_backend.h"
#include "core/error.h"

namespace dit {

namespace {

class ParamList {
 public:
  std::vector<VaeParam> list;
  void add(const std::string& name, std::vector<std::int64_t> shape) { list.push_back({name, std::move(shape)}); }
  void conv(const std::string& p, int cin, int cout, int k) {
    add(p + ".weight", {cout, cin, k, k});
    add(p + ".bias", {cout});
  }
  void norm(const std::string& p, int c) {
    add(p + ".weight", {c});
    add(p + ".bias", {c});
  }
  void linear(const std::string& p, int cin, int cout) {
    add(p + ".weight", {cout, cin});
    add(p + ".bias", {cout});
  }
  void resnet(const std::string& p, int cin, int cout) {
    norm(p + ".norm1", cin);
    conv(p + ".conv1", cin, cout, 3);
    norm(p + ".norm2", cout);
    conv(p + ".conv2", cout, cout, 3);
    if (cin != cout) conv(p + ".conv_shortcut", cin, cout, 1);
  }
  void attention(const std::string& p, int c) {
    norm(p + ".group_norm", c);
    for (const char* m : {".to_q", ".to_k", ".to_v", ".to_out.0"}) linear(p + m, c, c);
  }
  void mid(const std::string& p, int c, bool attn) {
    resnet(p + ".resnets.0", c, c);
    if (attn) attention(p + ".attentions.0", c);
    resnet(p + ".resnets.1", c, c);
  }
};

std::string idx(const std::string& p, std::size_t i) { return p + "." + std::to_string(i); }

}  // namespace

void VaeConfig::check(const std::string& where) const {
  DIT_CHECK(in_channels > 0 && out_channels > 0 && latent_channels > 0, where,
            ": in_channels, out_channels and latent_channels must be positive");
  DIT_CHECK(!block_out_channels.empty() && block_out_channels.size() <= 8, where,
            ": block_out_channels must list 1 to 8 blocks, got ", block_out_channels.size());
  DIT_CHECK(layers_per_block > 0 && layers_per_block <= 16, where, ": layers_per_block must be 1 to 16, got ",
            layers_per_block);
  DIT_CHECK(norm_num_groups > 0, where, ": norm_num_groups must be positive, got ", norm_num_groups);
  for (int c : block_out_channels)
    DIT_CHECK(c > 0 && c % norm_num_groups == 0, where, ": every block's channels must be a positive multiple of ",
              "norm_num_groups = ", norm_num_groups, ", got ", c);
  DIT_CHECK(eps > 0.f, where, ": the norms' eps must be positive");
}

std::string VaeConfig::describe() const {
  std::ostringstream o;
  o << "AutoencoderKL: blocks ";
  for (std::size_t i = 0; i < block_out_channels.size(); ++i) o << (i ? "/" : "") << block_out_channels[i];
  o << ", " << layers_per_block << " ResNets per block, " << norm_num_groups << " norm groups, " << latent_channels
    << " latent channels, downsampling " << downsampling() << "x, " << in_channels << " image channels"
    << (mid_block_attention ? "" : ", no mid-block attention");
  return o.str();
}

std::int64_t VaeParam::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::vector<VaeParam> vae_parameters(const VaeConfig& c) {
  const auto& ch = c.block_out_channels;
  const std::size_t blocks = ch.size();
  ParamList p;
  p.conv("encoder.conv_in", c.in_channels, ch[0], 3);
  for (std::size_t i = 0; i < blocks; ++i) {
    const std::string b = idx("encoder.down_blocks", i);
    const int cin = ch[i == 0 ? 0 : i - 1];
    for (int j = 0; j < c.layers_per_block; ++j) p.resnet(idx(b + ".resnets", j), j == 0 ? cin : ch[i], ch[i]);
    if (i + 1 < blocks) p.conv(b + ".downsamplers.0.conv", ch[i], ch[i], 3);
  }
  p.mid("encoder.mid_block", ch.back(), c.mid_block_attention);
  p.norm("encoder.conv_norm_out", ch.back());
  p.conv("encoder.conv_out", ch.back(), 2 * c.latent_channels, 3);
  if (c.use_quant_conv) p.conv("quant_conv", 2 * c.latent_channels, 2 * c.latent_channels, 1);
  if (c.use_post_quant_conv) p.conv("post_quant_conv", c.latent_channels, c.latent_channels, 1);
  p.conv("decoder.conv_in", c.latent_channels, ch.back(), 3);
  p.mid("decoder.mid_block", ch.back(), c.mid_block_attention);
  for (std::size_t i = 0; i < blocks; ++i) {
    const std::string b = idx("decoder.up_blocks", i);
    const int out = ch[blocks - 1 - i], prev = ch[blocks - (i == 0 ? 1 : i)];
    for (int j = 0; j <= c.layers_per_block; ++j) p.resnet(idx(b + ".resnets", j), j == 0 ? prev : out, out);
    if (i + 1 < blocks) p.conv(b + ".upsamplers.0.conv", out, out, 3);
  }
  p.norm("decoder.conv_norm_out", ch[0]);
  p.conv("decoder.conv_out", ch[0], c.out_channels, 3);
  return p.list;
}

Vae::Vae(Backend& be, const VaeConfig& cfg, const VaeWeightSource& source) : be_(be), cfg_(cfg), arena_(be) {
  cfg_.check("the VAE's configuration");
  const std::vector<VaeParam> list = vae_parameters(cfg_);
  const DType dt = be_.compute_dtype();
  const std::size_t elem = dtype_size(dt), align = 256;
  std::size_t bytes = 0;
  for (const VaeParam& p : list) bytes += (static_cast<std::size_t>(p.numel()) * elem + align - 1) / align * align;
  // The attention's q, k and v are fused into one (3C, C) projection: room for them after the rest.
  for (const VaeParam& p : list)
    if (p.name.size() > 12 && p.name.compare(p.name.size() - 12, 12, ".to_q.weight") == 0)
      bytes += 2 * ((static_cast<std::size_t>(3 * p.numel() + 3 * p.shape[0]) * elem + align - 1) / align * align);
  params_ = Buffer(be_, bytes);
  std::size_t offset = 0;
  auto place = [&](Shape s) {
    Tensor t = params_.tensor(s, dt, offset);
    offset += (static_cast<std::size_t>(s.numel()) * elem + align - 1) / align * align;
    return t;
  };
  const bool planning = be_.device() == Device::Virtual;  // lays the memory out, reads nothing
  for (const VaeParam& p : list) {
    Shape s;
    for (auto d : p.shape) s.dims[s.rank++] = d;
    const Tensor t = place(s);
    if (!planning) {
      const std::vector<float> v = source(p);
      DIT_CHECK(static_cast<std::int64_t>(v.size()) == p.numel(), "VAE parameter ", p.name, ": ", v.size(),
                " values for ", p.numel());
      be_.copy(t, Tensor{const_cast<float*>(v.data()), DType::F32, t.shape, Device::Host});
    }
    named_.emplace_back(p.name, t);
    params_count_ += p.numel();
  }
  std::sort(named_.begin(), named_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const VaeParam& p : list) {
    const std::string suffix = ".to_q.weight";
    if (p.name.size() <= suffix.size() || p.name.compare(p.name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string a = p.name.substr(0, p.name.size() - suffix.size());
    const std::int64_t c = p.shape[0];
    AttnWeights w{place(Shape{3 * c, c}), place(Shape{3 * c})};
    for (int k = 0; k < 3; ++k) {
      const std::string m = k == 0 ? ".to_q" : k == 1 ? ".to_k" : ".to_v";
      be_.copy(w.qkv_w.rows(k * c, c), param(a + m + ".weight"));
      be_.copy(w.qkv_b.rows(k * c, c), param(a + m + ".bias"));
    }
    attn_.emplace_back(a, w);
  }
}

const Tensor& Vae::param(const std::string& name) const {
  auto it = std::lower_bound(named_.begin(), named_.end(), name,
                             [](const auto& e, const std::string& n) { return e.first < n; });
  DIT_CHECK(it != named_.end() && it->first == name, "the VAE has no parameter ", name);
  return it->second;
}

Tensor Vae::alloc(Shape s) { return arena_.tensor(s, be_.compute_dtype()); }

void Vae::emit(const std::string& name, const Tensor& t) {
  if (on_activation) on_activation(name, t);
}

Tensor Vae::conv(const std::string& p, const Tensor& x, const ConvGeometry& g) {
  const Tensor& w = param(p + ".weight");
  const std::int64_t oh = (x.dim(2) + g.pad_top + g.pad_bottom - w.dim(2)) / g.stride_h + 1;
  const std::int64_t ow = (x.dim(3) + g.pad_left + g.pad_right - w.dim(3)) / g.stride_w + 1;
  Tensor y = alloc(Shape{x.dim(0), w.dim(0), oh, ow});
  be_.conv2d_fwd(x, w, param(p + ".bias"), g, y, Accumulate::Overwrite);
  return y;
}

Tensor Vae::norm(const std::string& p, const Tensor& x, bool silu) {
  Tensor y = alloc(x.shape);
  be_.group_norm_fwd(x, cfg_.norm_num_groups, param(p + ".weight"), param(p + ".bias"), cfg_.eps, silu, y);
  return y;
}

Tensor Vae::resnet(const std::string& p, const Tensor& x) {
  const Tensor& w2 = param(p + ".conv2.weight");
  Tensor out = alloc(Shape{x.dim(0), w2.dim(0), x.dim(2), x.dim(3)});
  const Arena::Mark m = arena_.mark();
  Tensor h = conv(p + ".conv1", norm(p + ".norm1", x, true), ConvGeometry::same(1));
  be_.group_norm_fwd(h, cfg_.norm_num_groups, param(p + ".norm2.weight"), param(p + ".norm2.bias"), cfg_.eps, true, h);
  // out = shortcut(x) + conv2(h): the residual added inside the convolution, one rounding.
  if (x.dim(1) != out.dim(1))
    be_.conv2d_fwd(x, param(p + ".conv_shortcut.weight"), param(p + ".conv_shortcut.bias"), ConvGeometry::same(0),
                   out, Accumulate::Overwrite);
  else
    be_.copy(out, x);
  be_.conv2d_fwd(h, w2, param(p + ".conv2.bias"), ConvGeometry::same(1), out, Accumulate::Add);
  arena_.rewind(m);
  return out;
}

Tensor Vae::attention(const std::string& p, const Tensor& x) {
  auto it = std::find_if(attn_.begin(), attn_.end(), [&](const auto& e) { return e.first == p; });
  DIT_CHECK(it != attn_.end(), "the VAE has no attention ", p);
  const std::int64_t n = x.dim(0), c = x.dim(1), hw = x.dim(2) * x.dim(3);
  Tensor out = alloc(x.shape);
  const Arena::Mark m = arena_.mark();
  // Tokens (N, HW, C) of the normalized image (N, C, HW): one transpose per image.
  const Tensor hn = norm(p + ".group_norm", x, false);
  Tensor tokens = alloc(Shape{n * hw, c});
  for (std::int64_t i = 0; i < n; ++i)
    be_.transpose_01(hn.view(Shape{n * c, hw, 1}).rows(i * c, c), tokens.rows(i * hw, hw).view(Shape{hw, c, 1}));
  Tensor qkv = alloc(Shape{n * hw, 3 * c});
  be_.gemm_bias(tokens, Transpose::No, it->second.qkv_w, Transpose::Yes, it->second.qkv_b, qkv);
  Tensor att = alloc(Shape{n, hw, c});
  Tensor lse = arena_.tensor(Shape{n, 1, hw}, DType::F32);
  be_.attention_fwd(qkv.view(Shape{n, hw, 3 * c}), 1, att, lse);
  be_.gemm_bias(att.view(Shape{n * hw, c}), Transpose::No, param(p + ".to_out.0.weight"), Transpose::Yes,
                param(p + ".to_out.0.bias"), tokens);
  for (std::int64_t i = 0; i < n; ++i)
    be_.transpose_01(tokens.rows(i * hw, hw).view(Shape{hw, c, 1}), out.view(Shape{n * c, hw, 1}).rows(i * c, c));
  be_.axpy(1.f, x, out);  // the residual connection (rescale factor 1)
  arena_.rewind(m);
  return out;
}

Tensor Vae::mid_block(const std::string& p, const Tensor& x) {
  Tensor h = resnet(p + ".resnets.0", x);
  if (cfg_.mid_block_attention) {
    h = attention(p + ".attentions.0", h);
    emit(p + ".attentions.0", h);
  }
  return resnet(p + ".resnets.1", h);
}

void Vae::encode(const Tensor& images, const Tensor& moments) {
  const std::int64_t f = cfg_.downsampling();
  DIT_CHECK(images.shape.rank == 4 && images.dim(1) == cfg_.in_channels && images.dim(2) % f == 0 &&
                images.dim(3) % f == 0 && moments.shape == Shape({images.dim(0), 2 * cfg_.latent_channels,
                                                                 images.dim(2) / f, images.dim(3) / f}),
            "VAE encode: images ", images.shape.str(), " and moments ", moments.shape.str(), ": expected images (N, ",
            cfg_.in_channels, ", H, W) with H and W multiples of ", f, " and moments (N, ", 2 * cfg_.latent_channels,
            ", H/", f, ", W/", f, ")");
  arena_.reset();
  const auto& ch = cfg_.block_out_channels;
  Tensor h = conv("encoder.conv_in", images, ConvGeometry::same(1));
  emit("encoder.conv_in", h);
  for (std::size_t i = 0; i < ch.size(); ++i) {
    const std::string b = "encoder.down_blocks." + std::to_string(i);
    for (int j = 0; j < cfg_.layers_per_block; ++j) {
      h = resnet(b + ".resnets." + std::to_string(j), h);
      emit(b + ".resnets." + std::to_string(j), h);
    }
    if (i + 1 < ch.size()) h = conv(b + ".downsamplers.0.conv", h, ConvGeometry{2, 2, 0, 1, 0, 1});
    emit(b, h);
  }
  h = mid_block("encoder.mid_block", h);
  emit("encoder.mid_block", h);
  const Tensor normed = norm("encoder.conv_norm_out", h, false);
  emit("encoder.conv_norm_out", normed);
  be_.silu_fwd(normed, normed);
  if (!cfg_.use_quant_conv) {
    be_.conv2d_fwd(normed, param("encoder.conv_out.weight"), param("encoder.conv_out.bias"), ConvGeometry::same(1),
                   moments, Accumulate::Overwrite);
    emit("encoder.conv_out", moments);
  } else {
    h = conv("encoder.conv_out", normed, ConvGeometry::same(1));
    emit("encoder.conv_out", h);
    be_.conv2d_fwd(h, param("quant_conv.weight"), param("quant_conv.bias"), ConvGeometry::same(0), moments,
                   Accumulate::Overwrite);
  }
  emit("quant_conv", moments);
  arena_.reset();
}

void Vae::decode(const Tensor& latents, const Tensor& images) {
  const std::int64_t f = cfg_.downsampling();
  DIT_CHECK(latents.shape.rank == 4 && latents.dim(1) == cfg_.latent_channels &&
                images.shape == Shape({latents.dim(0), cfg_.out_channels, latents.dim(2) * f, latents.dim(3) * f}),
            "VAE decode: latents ", latents.shape.str(), " and images ", images.shape.str(), ": expected latents (N, ",
            cfg_.latent_channels, ", h, w) and images (N, ", cfg_.out_channels, ", ", f, "h, ", f, "w)");
  arena_.reset();
  const auto& ch = cfg_.block_out_channels;
  Tensor h = latents;
  if (cfg_.use_post_quant_conv) {
    h = conv("post_quant_conv", latents, ConvGeometry::same(0));
    emit("post_quant_conv", h);
  }
  h = conv("decoder.conv_in", h, ConvGeometry::same(1));
  emit("decoder.conv_in", h);
  h = mid_block("decoder.mid_block", h);
  emit("decoder.mid_block", h);
  for (std::size_t i = 0; i < ch.size(); ++i) {
    const std::string b = "decoder.up_blocks." + std::to_string(i);
    for (int j = 0; j <= cfg_.layers_per_block; ++j) h = resnet(b + ".resnets." + std::to_string(j), h);
    if (i + 1 < ch.size()) {
      Tensor up = alloc(Shape{h.dim(0), h.dim(1), 2 * h.dim(2), 2 * h.dim(3)});
      be_.upsample_nearest2x(h, up);
      h = conv(b + ".upsamplers.0.conv", up, ConvGeometry::same(1));
    }
    emit(b, h);
  }
  const Tensor normed = norm("decoder.conv_norm_out", h, true);
  be_.conv2d_fwd(normed, param("decoder.conv_out.weight"), param("decoder.conv_out.bias"), ConvGeometry::same(1),
                 images, Accumulate::Overwrite);
  emit("decoder.conv_out", images);
  arena_.reset();
}

namespace {
VirtualBackend::Attention vae_attention(BackendKind backend) {
  return backend == BackendKind::Cuda || attention_path_from_env() == AttentionPath::Composed
             ? VirtualBackend::Attention::Composed
             : VirtualBackend::Attention::Fused;
}
}  // namespace

std::size_t vae_decode_bytes(const VaeConfig& cfg, DType dtype, std::int64_t n, std::int64_t h, std::int64_t w,
                             BackendKind backend) {
  VirtualBackend plan(dtype, vae_attention(backend));
  Vae vae(plan, cfg, nullptr);
  Arena io(plan);
  const std::int64_t f = cfg.downsampling();
  vae.decode(io.tensor(Shape{n, cfg.latent_channels, h, w}, dtype),
             io.tensor(Shape{n, cfg.out_channels, h * f, w * f}, dtype));
  return plan.allocated_bytes() + plan.workspace_bytes();
}

std::size_t vae_encode_bytes(const VaeConfig& cfg, DType dtype, std::int64_t n, std::int64_t height, std::int64_t width,
                             BackendKind backend) {
  VirtualBackend plan(dtype, vae_attention(backend));
  Vae vae(plan, cfg, nullptr);
  Arena io(plan);
  const std::int64_t f = cfg.downsampling();
  vae.encode(io.tensor(Shape{n, cfg.in_channels, height, width}, dtype),
             io.tensor(Shape{n, 2 * cfg.latent_channels, height / f, width / f}, dtype));
  return plan.allocated_bytes() + plan.workspace_bytes();
}

}  // namespace dit
