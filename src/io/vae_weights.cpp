// Opening a VAE's safetensors file (see vae_weights.h): the naming is recognized from the first
// ResNet's norm, the architecture read from config.json or from the shapes, and every parameter the
// architecture needs is looked up and shape-checked before anything is uploaded.
#include "io/vae_weights.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "io/json.h"
#include "io/file_safety.h"

namespace dit {

namespace fs = std::filesystem;

namespace {

// "a.b.c" split at dots.
std::vector<std::string> parts_of(const std::string& name) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : name) {
    if (c == '.') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

std::string joined(const std::vector<std::string>& p, std::size_t from = 0) {
  std::string s;
  for (std::size_t i = from; i < p.size(); ++i) s += (i > from ? "." : "") + p[i];
  return s;
}

// The attention's modules under their legacy diffusers and their latent-diffusion names.
std::string attention_module(const std::string& m, VaeNaming n) {
  if (n == VaeNaming::DiffusersLegacyAttention) {
    if (m == "to_q") return "query";
    if (m == "to_k") return "key";
    if (m == "to_v") return "value";
    if (m == "to_out") return "proj_attn";
  } else if (n == VaeNaming::Ldm) {
    if (m == "to_q") return "q";
    if (m == "to_k") return "k";
    if (m == "to_v") return "v";
    if (m == "to_out") return "proj_out";
    if (m == "group_norm") return "norm";
  }
  return m;
}

// A mid block's part (resnets.K, attentions.0) and the rest, in latent-diffusion naming.
std::string ldm_mid(const std::vector<std::string>& p, std::size_t i) {
  // p[i] = "resnets" | "attentions", p[i+1] = index
  if (p[i] == "resnets") return std::string("block_") + (p[i + 1] == "0" ? "1" : "2") + "." + joined(p, i + 2);
  std::string module = p[i + 2], rest = joined(p, i + 3);
  if (module == "to_out") rest = joined(p, i + 4);  // to_out.0.weight -> proj_out.weight
  return "attn_1." + attention_module(module, VaeNaming::Ldm) + "." + rest;
}

std::string ldm_name(const std::string& name, std::size_t blocks) {
  const std::vector<std::string> p = parts_of(name);
  if (p[0] != "encoder" && p[0] != "decoder") return name;  // quant_conv, post_quant_conv
  const std::string side = p[0];
  if (p[1] == "conv_norm_out") return side + ".norm_out." + joined(p, 2);
  if (p[1] == "mid_block") return side + ".mid." + ldm_mid(p, 2);
  if (p[1] == "down_blocks" || p[1] == "up_blocks") {
    std::size_t b = std::strtoul(p[2].c_str(), nullptr, 10);
    if (p[1] == "up_blocks") b = blocks - 1 - b;  // latent diffusion counts the decoder's blocks upwards
    const std::string block = side + (p[1] == "down_blocks" ? ".down." : ".up.") + std::to_string(b);
    if (p[3] == "resnets") {
      std::string module = p[5] == "conv_shortcut" ? "nin_shortcut" : p[5];
      return block + ".block." + p[4] + "." + module + "." + joined(p, 6);
    }
    return block + (p[3] == "downsamplers" ? ".downsample." : ".upsample.") + joined(p, 5);
  }
  return name;  // conv_in, conv_out
}

std::string legacy_name(const std::string& name) {
  const std::vector<std::string> p = parts_of(name);
  for (std::size_t i = 0; i + 2 < p.size(); ++i)
    if (p[i] == "attentions") {
      const std::string m = p[i + 2];
      if (m != "to_q" && m != "to_k" && m != "to_v" && m != "to_out") return name;
      std::vector<std::string> q(p.begin(), p.begin() + static_cast<long>(i) + 2);
      q.push_back(attention_module(m, VaeNaming::DiffusersLegacyAttention));
      for (std::size_t j = i + (m == "to_out" ? 4 : 3); j < p.size(); ++j) q.push_back(p[j]);
      return joined(q);
    }
  return name;
}

int json_int(const Json& v, const std::string& where, const std::string& key) {
  char* end = nullptr;
  const long x = std::strtol(v.text.c_str(), &end, 10);
  DIT_CHECK(v.kind == Json::Kind::Number && end && *end == '\0' && x > 0 && x <= 1 << 20, where, ": ", key,
            " must be a positive integer, got '", v.text, "'");
  return static_cast<int>(x);
}

double json_number(const Json& v, const std::string& where, const std::string& key) {
  char* end = nullptr;
  const double x = std::strtod(v.text.c_str(), &end);
  DIT_CHECK(v.kind == Json::Kind::Number && end && *end == '\0' && std::isfinite(x), where, ": ", key,
            " must be a finite number, got '", v.text, "'");
  return x;
}

bool json_bool(const Json& v, const std::string& where, const std::string& key) {
  DIT_CHECK(v.kind == Json::Kind::Other && (v.text == "true" || v.text == "false"), where, ": ", key,
            " must be true or false");
  return v.text == "true";
}

// diffusers' config.json of an AutoencoderKL into `f`.
void read_config(VaeFile& f) {
  require_regular(f.config_path, "the VAE's config.json");
  std::ifstream in(f.config_path, std::ios::binary);
  DIT_CHECK(in, f.config_path, ": cannot read the VAE's config.json");
  std::ostringstream text;
  text << in.rdbuf();
  DIT_CHECK(text.str().size() < (1u << 20), f.config_path, ": larger than a VAE's config.json can be");
  const Json doc = parse_json(text.str(), f.config_path, "", 8);
  const std::string& where = f.config_path;
  DIT_CHECK(doc.kind == Json::Kind::Object, where, ": expected a JSON object (diffusers' config.json)");
  if (const Json* c = doc.find("_class_name"))
    DIT_CHECK(c->text == "AutoencoderKL", where, ": _class_name is '", c->text,
              "'; dit_mp reads AutoencoderKL's configuration");
  VaeConfig& cfg = f.config;
  if (const Json* v = doc.find("in_channels")) cfg.in_channels = json_int(*v, where, "in_channels");
  if (const Json* v = doc.find("out_channels")) cfg.out_channels = json_int(*v, where, "out_channels");
  if (const Json* v = doc.find("latent_channels")) cfg.latent_channels = json_int(*v, where, "latent_channels");
  if (const Json* v = doc.find("layers_per_block")) cfg.layers_per_block = json_int(*v, where, "layers_per_block");
  if (const Json* v = doc.find("norm_num_groups")) cfg.norm_num_groups = json_int(*v, where, "norm_num_groups");
  if (const Json* v = doc.find("block_out_channels")) {
    DIT_CHECK(v->kind == Json::Kind::Array, where, ": block_out_channels must be a list of integers");
    cfg.block_out_channels.clear();
    for (const Json& c : v->items) cfg.block_out_channels.push_back(json_int(c, where, "block_out_channels"));
  }
  for (const char* key : {"down_block_types", "up_block_types"})
    if (const Json* v = doc.find(key)) {
      const std::string want = std::string(key) == "down_block_types" ? "DownEncoderBlock2D" : "UpDecoderBlock2D";
      for (const Json& t : v->items)
        DIT_CHECK(t.text == want, where, ": ", key, " has '", t.text, "'; dit_mp builds ", want, " blocks only");
    }
  if (const Json* v = doc.find("act_fn"))
    DIT_CHECK(v->text == "silu", where, ": act_fn is '", v->text, "'; the VAE's activation must be silu");
  if (const Json* v = doc.find("mid_block_add_attention"))
    cfg.mid_block_attention = json_bool(*v, where, "mid_block_add_attention");
  if (const Json* v = doc.find("use_quant_conv")) cfg.use_quant_conv = json_bool(*v, where, "use_quant_conv");
  if (const Json* v = doc.find("use_post_quant_conv"))
    cfg.use_post_quant_conv = json_bool(*v, where, "use_post_quant_conv");
  if (const Json* v = doc.find("force_upcast")) f.force_upcast = json_bool(*v, where, "force_upcast");
  // The latents' affine map, latent = (mean - shift) * scale: a scale of 0 or below would make every
  // latent 0 or flip its sign, and becomes the dataset's latent_scale.
  if (const Json* v = doc.find("scaling_factor")) {
    f.scaling_factor = json_number(*v, where, "scaling_factor");
    DIT_CHECK(f.scaling_factor > 0, where, ": scaling_factor must be a number > 0 (latents are multiplied by it), "
              "got '", v->text, "'");
  }
  if (const Json* v = doc.find("shift_factor"); v && !(v->kind == Json::Kind::Other && v->text == "null"))
    f.shift_factor = json_number(*v, where, "shift_factor");  // null: no shift (diffusers' default)
  cfg.check(where);
  for (const char* key : {"latents_mean", "latents_std"}) {
    const Json* v = doc.find(key);
    if (!v || (v->kind == Json::Kind::Other && v->text == "null")) continue;
    DIT_CHECK(v->kind == Json::Kind::Array && static_cast<int>(v->items.size()) == cfg.latent_channels, where, ": ",
              key, " must be a list of ", cfg.latent_channels, " numbers (one per latent channel)");
    std::vector<double>& out = std::string(key) == "latents_mean" ? f.latents_mean : f.latents_std;
    for (const Json& x : v->items) out.push_back(json_number(x, where, key));
  }
  DIT_CHECK(f.latents_mean.empty() == f.latents_std.empty(), where, ": latents_mean and latents_std go together");
  for (double s : f.latents_std)
    DIT_CHECK(std::isfinite(s) && s > 0, where, ": latents_std holds ", s, "; expected finite numbers > 0 (latents "
              "are divided by them)");
}

}  // namespace

// What a VAE without config.json takes on trust: its shapes give every size but these two.
const char* const kVaeAssumed =
    "assumed: 32 norm groups and scaling_factor 0.18215, as Stable Diffusion's VAEs have (the tensor shapes "
    "cannot give them; --vae-config names a config.json that does)";

namespace {

// The architecture from the shapes (no config.json): 32 norm groups.
void infer_config(VaeFile& f) {
  const SafetensorsFile& st = *f.file;
  auto stored = [&](const std::string& name) { return st.find(f.stored_name(name)); };
  VaeConfig& cfg = f.config;
  cfg.block_out_channels.clear();
  cfg.layers_per_block = 1;  // for stored_name of the probes below; counted next
  for (std::size_t i = 0; i < 8; ++i) {
    const StTensor* t = stored("encoder.down_blocks." + std::to_string(i) + ".resnets.0.conv1.weight");
    if (t == nullptr || t->shape.size() != 4) break;
    cfg.block_out_channels.push_back(static_cast<int>(t->shape[0]));
  }
  DIT_CHECK(!cfg.block_out_channels.empty(), f.path, ": no encoder ResNet block found (",
            f.stored_name("encoder.down_blocks.0.resnets.0.conv1.weight"), ")");
  int layers = 0;
  while (layers < 16 && stored("encoder.down_blocks.0.resnets." + std::to_string(layers) + ".conv1.weight")) ++layers;
  cfg.layers_per_block = layers;
  const StTensor* conv_in = stored("encoder.conv_in.weight");
  const StTensor* conv_out = stored("decoder.conv_out.weight");
  const StTensor* dec_in = stored("decoder.conv_in.weight");
  DIT_CHECK(conv_in && conv_out && dec_in && conv_in->shape.size() == 4 && conv_out->shape.size() == 4 &&
                dec_in->shape.size() == 4,
            f.path, ": the encoder's conv_in, the decoder's conv_in and conv_out must be 4-D convolutions");
  cfg.in_channels = static_cast<int>(conv_in->shape[1]);
  cfg.out_channels = static_cast<int>(conv_out->shape[0]);
  cfg.latent_channels = static_cast<int>(dec_in->shape[1]);
  cfg.mid_block_attention = stored("encoder.mid_block.attentions.0.to_q.weight") != nullptr;
  cfg.use_quant_conv = stored("quant_conv.weight") != nullptr;
  cfg.use_post_quant_conv = stored("post_quant_conv.weight") != nullptr;
  cfg.norm_num_groups = 32;
  cfg.check(f.path + " (the architecture read from its shapes, 32 norm groups)");
}

}  // namespace

const char* vae_naming_name(VaeNaming n) {
  switch (n) {
    case VaeNaming::Diffusers: return "diffusers";
    case VaeNaming::DiffusersLegacyAttention: return "diffusers (legacy attention names)";
    case VaeNaming::Ldm: return "latent diffusion (LDM)";
  }
  return "?";
}

std::string VaeFile::stored_name(const std::string& name) const {
  switch (naming) {
    case VaeNaming::Diffusers: return prefix + name;
    case VaeNaming::DiffusersLegacyAttention: return prefix + legacy_name(name);
    case VaeNaming::Ldm: return prefix + ldm_name(name, config.block_out_channels.size());
  }
  return name;
}

VaeWeightSource VaeFile::source() const {
  return [f = *this](const VaeParam& p) {
    const std::string stored = f.stored_name(p.name);
    const StTensor* t = f.file->find(stored);
    DIT_CHECK(t != nullptr, f.path, ": no tensor ", stored, " (the VAE's ", p.name, "; ", vae_naming_name(f.naming),
              " naming, ", f.file->tensors().size(), " tensors in the file)");
    std::vector<std::int64_t> want = p.shape;
    if (f.naming == VaeNaming::Ldm && want.size() == 2 && t->shape.size() == 4) {
      want.push_back(1);  // latent diffusion's attention projections are 1x1 convolutions
      want.push_back(1);
    }
    return f.file->read_f32(stored, want);
  };
}

std::string VaeFile::describe() const {
  std::ostringstream o;
  o << config.describe() << "; " << vae_naming_name(naming) << " names" << (prefix.empty() ? "" : " under ") << prefix
    << "; latents scaled by " << scaling_factor;
  if (shift_factor != 0.0) o << " after shifting by " << shift_factor;
  if (!latents_mean.empty()) o << " per channel after its latents_mean, over its latents_std";
  o << "; architecture from " << (config_path.empty() ? "the tensor shapes" : config_path);
  if (config_path.empty()) o << "; " << kVaeAssumed;
  return o.str();
}

VaeFile open_vae(const std::string& path, const std::string& config) {
  VaeFile f;
  f.path = path;
  f.file = std::make_shared<SafetensorsFile>(path);
  for (const char* prefix : {"", "first_stage_model.", "vae."})
    if (f.file->find(std::string(prefix) + "encoder.conv_in.weight")) {
      f.prefix = prefix;
      break;
    }
  if (f.file->find(f.prefix + "encoder.down.0.block.0.norm1.weight")) {
    f.naming = VaeNaming::Ldm;
  } else {
    DIT_CHECK(f.file->find(f.prefix + "encoder.down_blocks.0.resnets.0.norm1.weight"), path,
              ": not a VAE in a naming dit_mp reads: no encoder.down_blocks.0.resnets.0.norm1.weight (diffusers) or ",
              "encoder.down.0.block.0.norm1.weight (latent diffusion)");
    f.naming = f.file->find(f.prefix + "encoder.mid_block.attentions.0.query.weight")
                   ? VaeNaming::DiffusersLegacyAttention
                   : VaeNaming::Diffusers;
  }
  f.config_path = vae_config_path(path, config);
  if (f.config_path.empty()) infer_config(f);
  else read_config(f);
  // Every parameter is there with its shape (values are read when a Vae is built).
  for (const VaeParam& prm : vae_parameters(f.config)) {
    const StTensor& t = f.file->at(f.stored_name(prm.name));
    std::int64_t numel = 1;
    for (auto d : t.shape) numel *= d;
    DIT_CHECK(numel == prm.numel(), path, ": ", f.stored_name(prm.name), " has shape ", t.shape_text(), "; the ",
              "architecture (", f.config.describe(), ") needs ", prm.numel(), " values");
  }
  return f;
}

std::string vae_config_path(const std::string& path, const std::string& given) {
  if (!given.empty() || path.empty()) return given;
  const fs::path p(path);
  std::error_code ec;
  for (const fs::path& c : {p.parent_path() / (p.stem().string() + "_config.json"), p.parent_path() / "config.json"})
    if (fs::exists(c, ec) && !fs::is_directory(c, ec)) return c.string();  // a FIFO too: the files' check refuses it
  return "";
}

}  // namespace dit
