"""Write float64 reference data for a tiny kl-f8 VAE, computed by diffusers' own `AutoencoderKL`.

The model is diffusers' `AutoencoderKL` (src/diffusers/models/autoencoders/autoencoder_kl.py and
vae.py, unets/unet_2d_blocks.py, resnet.py, downsampling.py, upsampling.py, attention_processor.py,
...) imported from a source tree given on the command line and run in float64 on Debian's
PyTorch 1.13. Nothing of the model is mirrored: every number below comes out of diffusers' forward
code (see "Shims" for what stands in for what 1.13 and this machine lack).

Usage (the shipped files; SRC from `git archive HEAD src/diffusers` of huggingface/diffusers):
  /usr/bin/python3 tools/make_vae_golden.py --diffusers-src SRC --diffusers-commit HASH \
      [--ldm-src LDM --ldm-commit HASH2] --out-dir tests/data
--diffusers-src is the repository root (with src/diffusers) or its src/ folder; the commit is read
with git when it is a work tree, else --diffusers-commit names it. --ldm-src (optional) is a
CompVis/stable-diffusion tree: the LDM-named file is then also loaded, strictly, into the original
LDM Encoder/Decoder (ldm/modules/diffusionmodules/model.py) and run (self-check only).

Files written to --out-dir
--------------------------
vae_tiny_config.json       diffusers config.json (`AutoencoderKL.save_config`), config below.
vae_tiny.safetensors       the weights, diffusers names (`encoder.down_blocks.0.resnets.0.norm1.weight`,
                           `encoder.mid_block.attentions.0.to_q.weight` (C, C), ...), F32.
vae_tiny_ldm.safetensors   the same values under the original LDM/CompVis names (see LDM names).
vae_tiny_golden.h5         float64 reference numbers (schema below).
Both safetensors files: tensors sorted by name, data in that order tiling the data section, header
padded with spaces to a multiple of 8, `__metadata__` {format: pt, diffusers_commit, names}.

Config (diffusers keys): in_channels 3, out_channels 3, latent_channels 4, block_out_channels
[16, 32], down_block_types 2 x DownEncoderBlock2D, up_block_types 2 x UpDecoderBlock2D,
layers_per_block 2, norm_num_groups 8, act_fn silu, sample_size 32, scaling_factor 0.18215,
mid_block_add_attention true (others: diffusers' defaults, written in the json).

Weights: torch.manual_seed(0), diffusers' own init (PyTorch defaults; nothing in the VAE is
zero-initialised), then every GroupNorm's weight := 1 + 0.1 randn and bias := 0.1 randn (module
order, same global RNG) so gamma/beta mix-ups show; then every parameter rounded to a bfloat16
value (held as float32) and only then cast to float64 (`model.double()`): the F32 files hold exactly
the golden's weights, and, as with the inputs, a bf16 or fp16 run holds them exactly too, so its
error against the golden is its own arithmetic's, not the rounding of the file.

vae_tiny_golden.h5 (every dataset float64, PyTorch NCHW layout; no weights inside)
---------------------------------------------------------------------------------
/config attrs: in_channels, out_channels, latent_channels, layers_per_block, norm_num_groups,
    sample_size, attention_heads (int64); block_out_channels (int64 array); scaling_factor, eps
    (1e-6: every GroupNorm of the model, the attention's group_norm included, read off the built
    modules), attention_scale (1/sqrt(C) = 1/sqrt(32)), logvar_min -30, logvar_max 20 (float64);
    act_fn "silu", upsample_mode "nearest", downsample_pad "0,1,0,1" (left,right,top,bottom),
    diffusers_commit, source (the command line) (strings).
/input/image        (2, 3, 32, 32) uniform in [-1, 1] (torch.Generator seed 1), bfloat16-representable.
/encoder/moments    (2, 8, 16, 16) quant_conv(encoder(image)) = the posterior's parameters.
/encoder/mean, /encoder/logvar, /encoder/std   (2, 4, 16, 16): DiagonalGaussianDistribution's
    mean, logvar = clamp(moments[:, 4:], -30, 20), std = exp(0.5 logvar).
/encoder/noise      (2, 4, 16, 16) standard normal (same generator), float32-representable.
/encoder/sample     diffusers' own `latent_dist.sample()` with its randn draw replaced by noise
                    (= mean + std * noise).
/decoder/latent     (2, 4, 16, 16) = /encoder/mean rounded to bfloat16 (the model inputs hold bf16
                    values, so a 16-bit run starts from the golden's own input).
/decoder/output     (2, 3, 32, 32) decode(latent).sample.
/activations/image  (2, 3, 16, 8) a second, smaller, NON-square input (same generator; bf16 values)
/activations/latent (2, 4, 8, 4) its encoder mean rounded to bfloat16. (The same hooks on the 32x32 pass would take
    2.8 MB, over the 2.5 MB budget of the four files; a non-square input also catches H/W
    mix-ups.) attr `input` says where each hook's input comes from.
/activations/<module path>   forward-hook outputs, named by diffusers' module path (dots kept):
    encoding /activations/image: encoder.conv_in, encoder.down_blocks.0.resnets.0,
    encoder.down_blocks.0 (after its downsampler), encoder.down_blocks.1.resnets.0 (the channel
    change, 16 -> 32, with conv_shortcut), encoder.down_blocks.1, encoder.mid_block.attentions.0,
    encoder.mid_block, encoder.conv_norm_out (GroupNorm output, before SiLU), encoder.conv_out,
    quant_conv; decoding /activations/latent: post_quant_conv, decoder.conv_in,
    decoder.mid_block.resnets.0, decoder.mid_block.attentions.0, decoder.mid_block,
    decoder.up_blocks.0 (after its upsampler), decoder.up_blocks.1, decoder.conv_out.
/ops/...            single primitives in isolation (torch float64; inputs and weights
                    float32-representable; torch.Generator seed 3):
    conv_asym/{x (2,5,9,9), w (7,5,3,3), b (7), y}: y = conv2d(F.pad(x, (0,1,0,1)), w, b, stride 2)
        (Downsample2D with padding=0); attrs stride 2, padding "0,1,0,1".
    conv_k1/{x (2,6,5,7), w (10,6,1,1), b, y}: 1x1, stride 1, no padding.
    conv_k3/{x (2,6,7,9), w (10,6,3,3), b, y}: 3x3, stride 1, padding 1.
    group_norm/{x (2,12,5,7), gamma (12), beta (12), y}, attrs groups 4, eps 1e-6 (biased var).
    upsample/{x (2,3,4,5), y (2,3,8,10)}: F.interpolate(scale_factor=2, mode="nearest").
    silu/{x (2,3,4,5), y}.
    vae_attention/{x (2,8,3,5), y, <param>}: diffusers' `Attention` built exactly as
        UNetMidBlock2D builds it (C 8, 1 head of dim 8, GroupNorm 4 groups eps 1e-6, residual
        connection, rescale_output_factor 1, upcast_softmax), params group_norm.weight/bias,
        to_q/to_k/to_v/to_out.0 .weight (8, 8) / .bias (8).

LDM names (vae_tiny_ldm.safetensors; the inverse of diffusers' `convert_ldm_vae_checkpoint`)
-------------------------------------------------------------------------------------------
  {encoder,decoder}.conv_norm_out          -> {encoder,decoder}.norm_out
  encoder.down_blocks.i.resnets.j          -> encoder.down.i.block.j
  encoder.down_blocks.i.downsamplers.0     -> encoder.down.i.downsample
  decoder.up_blocks.i.resnets.j            -> decoder.up.(n-1-i).block.j    (n = 2 up blocks)
  decoder.up_blocks.i.upsamplers.0         -> decoder.up.(n-1-i).upsample
  *.conv_shortcut                          -> *.nin_shortcut
  *.mid_block.resnets.0 / .1               -> *.mid.block_1 / .block_2
  *.mid_block.attentions.0.group_norm      -> *.mid.attn_1.norm
  *.mid_block.attentions.0.to_q/to_k/to_v/to_out.0 -> *.mid.attn_1.q/k/v/proj_out, weight
                                              (C, C) -> (C, C, 1, 1) (1x1 convs)
  conv_in, conv_out, quant_conv, post_quant_conv, norm1/conv1/norm2/conv2: unchanged.

Shims (only what Debian's PyTorch 1.13 / this machine lack; installed by `load_diffusers`)
------------------------------------------------------------------------------------------
- Placeholder modules (every attribute an inert class; a few constants given values):
  huggingface_hub (hub client, not installed), safetensors (checkpoint I/O: this tool reads and
  writes the format itself), tqdm, diffusers.dependency_versions_check (checks installed package
  metadata: filelock is absent), diffusers.quantizers (torch 2.x float8 dtypes),
  diffusers.hooks and diffusers.models._modeling_parallel (torch.distributed 2.x APIs),
  diffusers.models.transformers (the transformer models unet_2d_blocks imports for its
  cross-attention blocks; the VAE's blocks never build them).
- diffusers.models.autoencoders and diffusers.models.unets are loaded as bare packages (their
  __init__ imports every sibling model, many of them torch-2.x only); their modules are the real ones.
- torch.xpu / torch.mps: namespaces saying "not available"; torch.float8_e4m3fn: a placeholder
  object (a default argument value in ModelMixin).
- F.scaled_dot_product_attention does not exist in 1.13, so diffusers itself selects its classic
  `AttnProcessor` (baddbmm with alpha = attn.scale, softmax, bmm). The self-check also runs
  `AttnProcessor2_0` (torch >= 2's default) through an exact float64 SDPA: equal within 1e-13
  (bit for bit on the machine that wrote the files).
- ref_shims.Float64: `Tensor.float()` returns float64 there, so the attention's
  `upcast_softmax` (`.float()` on the scores) does not round the float64 scores to float32.

Self-checks after writing (the tool fails if any does not hold): the safetensors and h5 files are
re-read with an independent reader (json + numpy.frombuffer) and a model rebuilt from the written
config.json and vae_tiny.safetensors reproduces every dataset bit for bit; diffusers'
`convert_ldm_vae_checkpoint` maps the LDM file back onto the diffusers file exactly; the stock
float32 run is within 1e-4 (the float32 rule; it lands near 1e-5) relative L2 of every tensor; with --ldm-src the CompVis Encoder/Decoder
(GroupNorm groups set to 8; the original hard-codes 32) load the LDM file strictly and agree to 1e-12.
"""

import argparse
import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import io
import json
import os
import shlex
import subprocess
import sys
import tempfile
import types

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_shims as rs  # noqa: E402

F64 = torch.float64

CONFIG = dict(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=[16, 32],
              down_block_types=["DownEncoderBlock2D", "DownEncoderBlock2D"],
              up_block_types=["UpDecoderBlock2D", "UpDecoderBlock2D"], layers_per_block=2,
              norm_num_groups=8, act_fn="silu", sample_size=32, scaling_factor=0.18215,
              mid_block_add_attention=True)
BATCH = 2
ACT_HW = (16, 8)          # the activations' input: non-square, small (data budget)

ENCODER_HOOKS = ["encoder.conv_in", "encoder.down_blocks.0.resnets.0", "encoder.down_blocks.0",
                 "encoder.down_blocks.1.resnets.0", "encoder.down_blocks.1",
                 "encoder.mid_block.attentions.0",
                 "encoder.mid_block", "encoder.conv_norm_out", "encoder.conv_out", "quant_conv"]
DECODER_HOOKS = ["post_quant_conv", "decoder.conv_in", "decoder.mid_block.resnets.0",
                 "decoder.mid_block.attentions.0", "decoder.mid_block", "decoder.up_blocks.0",
                 "decoder.up_blocks.1", "decoder.conv_out"]


# ---------------------------------------------------------------------------------------------
# Shims and import of diffusers
# ---------------------------------------------------------------------------------------------

PLACEHOLDER_PREFIXES = ("huggingface_hub", "safetensors", "tqdm",
                        "diffusers.dependency_versions_check", "diffusers.quantizers",
                        "diffusers.hooks", "diffusers.models._modeling_parallel",
                        "diffusers.models.transformers")
PLACEHOLDER_VALUES = {"huggingface_hub.constants.HF_HOME": "/nonexistent/huggingface",
                      "huggingface_hub.constants.HF_HUB_OFFLINE": True,
                      "huggingface_hub.constants.HF_HUB_DISABLE_TELEMETRY": True,
                      "huggingface_hub.utils.is_jinja_available": lambda: False}
BARE_PACKAGES = ("diffusers.models.autoencoders", "diffusers.models.unets")


class _Inert:
    def __init__(self, *args, **kwargs):
        pass


class _Placeholder(types.ModuleType):
    def __getattr__(self, key):
        if key.startswith("__"):
            raise AttributeError(key)
        full = f"{self.__name__}.{key}"
        value = PLACEHOLDER_VALUES.get(full, None)
        if value is None:
            value = type(key, (_Inert,), {"__module__": self.__name__})
        setattr(self, key, value)
        return value


class _PlaceholderFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if any(name == p or name.startswith(p + ".") for p in PLACEHOLDER_PREFIXES):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _Placeholder(spec.name)

    def exec_module(self, module):
        module.__path__ = []


def _unavailable_backend(name):
    ns = types.ModuleType(name)
    ns.is_available = lambda: False
    ns.device_count = lambda: 0
    ns.max_memory_allocated = lambda *a, **k: 0
    for fn in ("empty_cache", "manual_seed", "synchronize", "reset_peak_memory_stats"):
        setattr(ns, fn, lambda *a, **k: None)
    return ns


def load_diffusers(src):
    """Import diffusers' AutoencoderKL (and the modules the checks use) from the tree `src`."""
    root = os.path.join(src, "src") if os.path.isdir(os.path.join(src, "src", "diffusers")) else src
    if not os.path.isfile(os.path.join(root, "diffusers", "models", "autoencoders",
                                       "autoencoder_kl.py")):
        raise SystemExit(f"--diffusers-src {src}: no diffusers/models/autoencoders/autoencoder_kl.py")
    sys.meta_path.insert(0, _PlaceholderFinder())
    for name in ("xpu", "mps"):
        if not hasattr(torch, name):
            setattr(torch, name, _unavailable_backend(f"torch.{name}"))
    if not hasattr(torch, "float8_e4m3fn"):
        torch.float8_e4m3fn = object()
    for pkg in BARE_PACKAGES:
        m = types.ModuleType(pkg)
        m.__path__ = [os.path.join(root, *pkg.split("."))]
        sys.modules[pkg] = m
    sys.path.insert(0, root)
    mods = types.SimpleNamespace(
        kl=importlib.import_module("diffusers.models.autoencoders.autoencoder_kl"),
        attn=importlib.import_module("diffusers.models.attention_processor"),
        sfu=importlib.import_module("diffusers.loaders.single_file_utils"),
        version=importlib.import_module("diffusers").__version__)
    assert not hasattr(F, "scaled_dot_product_attention")  # so diffusers picks AttnProcessor
    return mods


def repo_commit(path, given):
    if given:
        return given
    try:
        return subprocess.run(["git", "-C", path, "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except Exception:  # noqa: BLE001
        raise SystemExit(f"{path} is not a git work tree: name its commit (--diffusers-commit / "
                         f"--ldm-commit)")


# ---------------------------------------------------------------------------------------------
# Model, weights, LDM names
# ---------------------------------------------------------------------------------------------

def build_model(d):
    torch.manual_seed(0)
    model = d.kl.AutoencoderKL(**CONFIG)
    with torch.no_grad():
        for _, m in model.named_modules():
            if isinstance(m, nn.GroupNorm):
                m.weight.copy_(1.0 + 0.1 * torch.randn(m.weight.shape))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape))
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    assert all(v.dtype == torch.float32 for v in sd.values())
    for k, v in sd.items():   # nothing zero (diffusers zero-inits nothing in the VAE) or constant
        assert v.abs().max() > 0 and (v.numel() == 1 or v.std() > 0), k
    return model.double().eval(), sd


def model_facts(model):
    norms = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.GroupNorm)]
    eps = {m.eps for _, m in norms}
    groups = {m.num_groups for _, m in norms}
    assert len(eps) == 1 and len(groups) == 1, (eps, groups)
    attns = [m for n, m in model.named_modules() if n.endswith("mid_block.attentions.0")]
    assert len(attns) == 2
    for a in attns:
        assert type(a.processor).__name__ == "AttnProcessor", a.processor
        assert a.heads == 1 and a.residual_connection and a.rescale_output_factor == 1.0
        assert a.upcast_softmax and a.group_norm is not None and a.group_norm.eps == 1e-6
        assert a.spatial_norm is None and not a.upcast_attention
    assert attns[0].scale == 32 ** -0.5
    for n, m in model.named_modules():
        if type(m).__name__ == "Upsample2D":
            assert m.interpolate and m.use_conv and not m.use_conv_transpose, n
        if type(m).__name__ == "Downsample2D":
            assert m.padding == 0 and m.use_conv, n
    return dict(eps=eps.pop(), attention_scale=attns[0].scale, attention_heads=attns[0].heads)


def ldm_name(name, n_up):
    """diffusers AutoencoderKL name -> original LDM (CompVis) name."""
    p = name.split(".")
    if p[0] in ("encoder", "decoder"):
        if p[1] == "conv_norm_out":
            p[1] = "norm_out"
        elif p[1] == "down_blocks":          # encoder.down_blocks.i.{resnets.j|downsamplers.0}
            p[1] = "down"
            p[3:5] = ["block", p[4]] if p[3] == "resnets" else ["downsample"]
        elif p[1] == "up_blocks":            # decoder.up_blocks.i -> decoder.up.(n-1-i)
            p[1], p[2] = "up", str(n_up - 1 - int(p[2]))
            p[3:5] = ["block", p[4]] if p[3] == "resnets" else ["upsample"]
        elif p[1] == "mid_block":
            if p[2] == "resnets":
                p[1:4] = ["mid", f"block_{int(p[3]) + 1}"]
            else:                            # attentions.0.{group_norm,to_q,to_k,to_v,to_out.0}
                assert p[2:4] == ["attentions", "0"]
                rest = ".".join(p[4:])
                for a, b in (("group_norm.", "norm."), ("to_q.", "q."), ("to_k.", "k."),
                             ("to_v.", "v."), ("to_out.0.", "proj_out.")):
                    if rest.startswith(a):
                        rest = b + rest[len(a):]
                p = [p[0], "mid", "attn_1"] + rest.split(".")
    out = ".".join(p).replace("conv_shortcut", "nin_shortcut")
    return out


def ldm_state_dict(sd):
    n_up = len(CONFIG["up_block_types"])
    out = {}
    for k, v in sd.items():
        lk = ldm_name(k, n_up)
        if ".mid.attn_1." in lk and lk.endswith(".weight") and v.ndim == 2:
            v = v[:, :, None, None]                     # linear (C, C) -> 1x1 conv (C, C, 1, 1)
        assert lk not in out, lk
        out[lk] = v.contiguous()
    return out


# ---------------------------------------------------------------------------------------------
# safetensors, written and read here
# ---------------------------------------------------------------------------------------------

def write_safetensors(path, tensors, metadata):
    header, blobs, off = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        arr = tensors[name].detach().cpu().numpy()
        assert arr.dtype == np.float32
        data = np.ascontiguousarray(arr).astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape),
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(len(hb).to_bytes(8, "little"))
        f.write(hb)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """Independent reader: json header + numpy.frombuffer; checks the byte ranges tile the data."""
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    out, end = {}, 0
    for name, h in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, e = h["data_offsets"]
        assert h["dtype"] == "F32" and b == end, (name, b, end)
        arr = np.frombuffer(data[b:e], dtype="<f4").reshape(h["shape"])
        assert arr.size * 4 == e - b
        out[name] = arr
        end = e
    assert end == len(data), "data section not tiled exactly"
    return out, meta


# ---------------------------------------------------------------------------------------------
# Computations (float64)
# ---------------------------------------------------------------------------------------------

def f32_exact(t):
    return t.to(torch.float32).to(F64)


def bf16_exact(t):
    """The model inputs (images, latents) hold bfloat16 values, which fp16 and fp32 hold exactly
    too: a bf16 or fp16 run then starts from the golden's own input, and its error is the
    network's alone."""
    return t.to(torch.bfloat16).to(t.dtype)


@contextlib.contextmanager
def hooks(model, names):
    mods = dict(model.named_modules())
    got, handles = {}, []

    def hook(name):
        def fn(_mod, _inp, out):
            assert name not in got, f"{name} ran twice"
            got[name] = out.detach().clone()
        return fn

    for n in names:
        handles.append(mods[n].register_forward_hook(hook(n)))
    try:
        yield got
    finally:
        for h in handles:
            h.remove()
    assert set(got) == set(names), set(names) - set(got)


def draw_inputs():
    g = torch.Generator().manual_seed(1)
    image = bf16_exact(torch.rand(BATCH, 3, 32, 32, generator=g, dtype=F64) * 2 - 1)
    noise = f32_exact(torch.randn(BATCH, CONFIG["latent_channels"], 16, 16, generator=g, dtype=F64))
    act_image = bf16_exact(torch.rand(BATCH, 3, *ACT_HW, generator=g, dtype=F64) * 2 - 1)
    return image, noise, act_image


def compute(model, image, noise, act_image):
    """Everything in the h5 except /ops, from diffusers' own forward code."""
    res = {"image": image}
    with torch.no_grad():
        post = model.encode(image).latent_dist
        res["encoder"] = {"moments": post.parameters, "mean": post.mean, "logvar": post.logvar,
                          "std": post.std, "noise": noise}
        with rs.given_randn(noise):
            res["encoder"]["sample"] = post.sample()
        latent = bf16_exact(post.mean)
        res["decoder"] = {"latent": latent, "output": model.decode(latent).sample}
        with hooks(model, ENCODER_HOOKS) as enc:
            act_latent = bf16_exact(model.encode(act_image).latent_dist.mean)
        with hooks(model, DECODER_HOOKS) as dec:
            model.decode(act_latent)
    res["activations"] = {"image": act_image, "latent": act_latent, **enc, **dec}
    return res


def compute_ops(d):
    g = torch.Generator().manual_seed(3)

    def r(*shape, scale=1.0):
        return f32_exact(torch.randn(*shape, generator=g, dtype=F64) * scale)

    ops = {}
    x, w, b = r(2, 5, 9, 9), r(7, 5, 3, 3, scale=0.3), r(7, scale=0.1)
    ops["conv_asym"] = dict(x=x, w=w, b=b, y=F.conv2d(F.pad(x, (0, 1, 0, 1)), w, b, stride=2))
    x, w, b = r(2, 6, 5, 7), r(10, 6, 1, 1, scale=0.4), r(10, scale=0.1)
    ops["conv_k1"] = dict(x=x, w=w, b=b, y=F.conv2d(x, w, b))
    x, w, b = r(2, 6, 7, 9), r(10, 6, 3, 3, scale=0.2), r(10, scale=0.1)
    ops["conv_k3"] = dict(x=x, w=w, b=b, y=F.conv2d(x, w, b, padding=1))
    x = f32_exact(r(2, 12, 5, 7) * 1.5 + 0.7)
    gamma, beta = f32_exact(1 + r(12, scale=0.2)), r(12, scale=0.2)
    ops["group_norm"] = dict(x=x, gamma=gamma, beta=beta,
                             y=F.group_norm(x, 4, gamma, beta, eps=1e-6))
    x = r(2, 3, 4, 5)
    ops["upsample"] = dict(x=x, y=F.interpolate(x, scale_factor=2.0, mode="nearest"))
    x = r(2, 3, 4, 5, scale=3.0)
    ops["silu"] = dict(x=x, y=F.silu(x))
    # diffusers' Attention exactly as UNetMidBlock2D builds it, at C 8 with 4 groups
    attn = d.attn.Attention(8, heads=1, dim_head=8, rescale_output_factor=1.0, eps=1e-6,
                            norm_num_groups=4, spatial_norm_dim=None, residual_connection=True,
                            bias=True, upcast_softmax=True, _from_deprecated_attn_block=True)
    with torch.no_grad():
        for n, p in attn.named_parameters():
            p.copy_(f32_exact(1 + r(*p.shape, scale=0.1)) if n == "group_norm.weight"
                    else r(*p.shape, scale=0.4))
    attn = attn.double().eval()
    x = r(2, 8, 3, 5)
    with torch.no_grad(), rs.Float64():
        y = attn(x)
    ops["vae_attention"] = dict(x=x, y=y, **{n: p.detach().clone()
                                            for n, p in attn.named_parameters()})
    return ops, attn


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------

def write_group(f, path, tensors):
    grp = f.require_group(path)
    for name, v in tensors.items():
        arr = v.detach().cpu().numpy().astype(np.float64)
        grp.create_dataset(name, data=arr, track_times=False)
    return grp


def write_h5(path, res, ops, facts, commit, command):
    with h5py.File(path, "w") as f:
        c = f.create_group("config").attrs
        for k in ("in_channels", "out_channels", "latent_channels", "layers_per_block",
                  "norm_num_groups", "sample_size"):
            c[k] = np.int64(CONFIG[k])
        c["attention_heads"] = np.int64(facts["attention_heads"])
        c["block_out_channels"] = np.array(CONFIG["block_out_channels"], dtype=np.int64)
        c["scaling_factor"] = np.float64(CONFIG["scaling_factor"])
        c["eps"] = np.float64(facts["eps"])
        c["attention_scale"] = np.float64(facts["attention_scale"])
        c["logvar_min"], c["logvar_max"] = np.float64(-30.0), np.float64(20.0)
        c["act_fn"] = CONFIG["act_fn"]
        c["upsample_mode"] = "nearest"
        c["downsample_pad"] = "0,1,0,1"
        c["diffusers_commit"] = commit
        c["source"] = command
        write_group(f, "input", {"image": res["image"]})
        write_group(f, "encoder", res["encoder"])
        write_group(f, "decoder", res["decoder"])
        g = write_group(f, "activations", res["activations"])
        g.attrs["input"] = ("encoder.* and quant_conv: encoding /activations/image; "
                            "post_quant_conv and decoder.*: decoding /activations/latent "
                            "(the encoder mean of /activations/image)")
        for name, t in ops.items():
            grp = write_group(f, f"ops/{name}", t)
            if name == "conv_asym":
                grp.attrs["stride"], grp.attrs["padding"] = np.int64(2), "0,1,0,1"
            elif name in ("conv_k1", "conv_k3"):
                grp.attrs["stride"] = np.int64(1)
                grp.attrs["padding"] = np.int64(0 if name == "conv_k1" else 1)
            elif name == "group_norm":
                grp.attrs["groups"], grp.attrs["eps"] = np.int64(4), np.float64(1e-6)
            elif name == "upsample":
                grp.attrs["scale"], grp.attrs["mode"] = np.int64(2), "nearest"
            elif name == "vae_attention":
                grp.attrs["groups"], grp.attrs["eps"] = np.int64(4), np.float64(1e-6)
                grp.attrs["heads"], grp.attrs["scale"] = np.int64(1), np.float64(8 ** -0.5)


def h5_tensors(path):
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                assert obj.dtype == np.float64, name
                out[name] = torch.from_numpy(obj[()])
        f.visititems(visit)
    return out


# ---------------------------------------------------------------------------------------------
# Self-checks
# ---------------------------------------------------------------------------------------------

def flat(res):
    out = {"input/image": res["image"]}
    for g in ("encoder", "decoder", "activations"):
        out.update({f"{g}/{k}": v for k, v in res[g].items()})
    return out


def check_exact(d, out_dir, golden):
    cfg = json.load(open(os.path.join(out_dir, "vae_tiny_config.json")))
    model = d.kl.AutoencoderKL.from_config(cfg)
    sd, meta = read_safetensors(os.path.join(out_dir, "vae_tiny.safetensors"))
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in sd.items()}, strict=True)
    model = model.double().eval()
    g = golden
    with rs.Float64():
        res = compute(model, g["input/image"], g["encoder/noise"], g["activations/image"])
    again = flat(res)
    for k, v in again.items():
        assert torch.equal(v, g[k]), f"{k}: rerun differs"
    assert torch.equal(g["encoder/sample"], g["encoder/mean"] + g["encoder/std"] * g["encoder/noise"])
    assert torch.equal(g["encoder/std"], torch.exp(0.5 * g["encoder/logvar"]))
    assert torch.equal(g["decoder/latent"], bf16_exact(g["encoder/mean"]))
    n_ops = sum(1 for k in g if k.startswith("ops/"))
    print(f"  rerun from the written config.json + safetensors: {len(again)} datasets bitwise "
          f"equal; decoder/latent == bf16(encoder/mean); {n_ops} ops datasets")
    return model, sd, meta


def check_ldm_roundtrip(d, out_dir, sd):
    ldm, _ = read_safetensors(os.path.join(out_dir, "vae_tiny_ldm.safetensors"))
    conv = d.sfu.convert_ldm_vae_checkpoint({k: torch.from_numpy(v.copy()) for k, v in ldm.items()},
                                            CONFIG)
    assert set(conv) == set(sd), (set(conv) ^ set(sd))
    for k in sd:
        assert tuple(conv[k].shape) == sd[k].shape and np.array_equal(conv[k].numpy(), sd[k]), k
    print(f"  diffusers convert_ldm_vae_checkpoint(LDM file) == diffusers file ({len(sd)} tensors)")
    return ldm


SDPA_CALLS = []


def sdpa_f64(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    assert dropout_p == 0.0 and not is_causal and query.dtype == F64
    SDPA_CALLS.append(tuple(query.shape))
    s = query.shape[-1] ** -0.5 if scale is None else scale
    w = (query @ key.transpose(-2, -1)) * s
    if attn_mask is not None:
        w = w + attn_mask
    return w.softmax(dim=-1) @ value


def check_attention_2_0(d, model, golden):
    F.scaled_dot_product_attention = sdpa_f64
    SDPA_CALLS.clear()
    try:
        for n, m in model.named_modules():
            if n.endswith("attentions.0"):
                m.set_processor(d.attn.AttnProcessor2_0())
        with rs.Float64():
            res = flat(compute(model, golden["input/image"], golden["encoder/noise"],
                               golden["activations/image"]))
    finally:
        del F.scaled_dot_product_attention
        for n, m in model.named_modules():
            if n.endswith("attentions.0"):
                m.set_processor(d.attn.AttnProcessor())
    worst = max((rs.rel_l2(v, golden[k]), k) for k, v in res.items())
    assert worst[0] < 1e-13 and len(SDPA_CALLS) == 4, (worst, SDPA_CALLS)
    print(f"  AttnProcessor2_0 (exact float64 SDPA, {len(SDPA_CALLS)} calls) vs AttnProcessor: "
          f"worst rel L2 {worst[0]:.1e} ({worst[1]})")


def check_float32(d, sd, golden):
    model = d.kl.AutoencoderKL(**CONFIG)
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in sd.items()}, strict=True)
    model.eval()
    g32 = {k: v.float() for k, v in golden.items()}
    res = flat(compute(model, g32["input/image"], g32["encoder/noise"], g32["activations/image"]))
    worst = max((rs.rel_l2(v, golden[k]), k) for k, v in res.items())
    assert worst[0] < 1e-4, worst   # the float32 rule
    print(f"  stock float32 diffusers vs the float64 file: worst rel L2 {worst[0]:.1e} ({worst[1]})")


def load_ldm_model_module(ldm_src):
    path = os.path.join(ldm_src, "ldm", "modules", "diffusionmodules", "model.py")
    saved = {k: sys.modules.get(k) for k in ("einops", "ldm", "ldm.util", "ldm.modules",
                                             "ldm.modules.attention")}
    for k in saved:                # only its imports' names: the vanilla VAE uses none of them
        sys.modules[k] = _Placeholder(k)
    try:
        spec = importlib.util.spec_from_file_location("ldm_vae_model", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        for k, v in saved.items():
            if v is None:
                del sys.modules[k]
            else:
                sys.modules[k] = v
    return mod


def check_ldm_model(ldm_src, ldm, golden):
    mod = load_ldm_model_module(ldm_src)
    orig = mod.Normalize
    mod.Normalize = lambda c, num_groups=32: orig(c, num_groups=CONFIG["norm_num_groups"])
    ch = CONFIG["block_out_channels"][0]
    dd = dict(ch=ch, out_ch=CONFIG["out_channels"],
              ch_mult=tuple(c // ch for c in CONFIG["block_out_channels"]),
              num_res_blocks=CONFIG["layers_per_block"], attn_resolutions=[], dropout=0.0,
              in_channels=CONFIG["in_channels"], resolution=CONFIG["sample_size"],
              z_channels=CONFIG["latent_channels"], double_z=True)
    z = CONFIG["latent_channels"]
    with contextlib.redirect_stdout(io.StringIO()):
        vae = nn.Module()
        vae.encoder, vae.decoder = mod.Encoder(**dd), mod.Decoder(**dd)
    vae.quant_conv, vae.post_quant_conv = nn.Conv2d(2 * z, 2 * z, 1), nn.Conv2d(z, z, 1)
    vae.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in ldm.items()}, strict=True)
    vae = vae.double().eval()
    with torch.no_grad():
        moments = vae.quant_conv(vae.encoder(golden["input/image"]))
        out = vae.decoder(vae.post_quant_conv(golden["decoder/latent"]))
        act_out = vae.decoder(vae.post_quant_conv(golden["activations/latent"]))
    rows = [(rs.rel_l2(moments, golden["encoder/moments"]), "encoder/moments"),
            (rs.rel_l2(out, golden["decoder/output"]), "decoder/output"),
            (rs.rel_l2(act_out, golden["activations/decoder.conv_out"]), "decoder.conv_out")]
    worst = max(rows)
    assert worst[0] < 1e-12, rows
    print(f"  CompVis LDM Encoder/Decoder on the LDM file (strict load): worst {worst[0]:.1e} "
          f"({worst[1]})")


# ---------------------------------------------------------------------------------------------

def load_params(module, tensors):
    module.load_state_dict({n: tensors[n] for n, _ in module.named_parameters()}, strict=True)
    return module


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--diffusers-src", required=True,
                    help="huggingface/diffusers tree (repository root or its src/)")
    ap.add_argument("--diffusers-commit", help="its commit, when the tree is not a git work tree")
    ap.add_argument("--ldm-src", help="CompVis/stable-diffusion tree (optional extra check)")
    ap.add_argument("--ldm-commit", help="its commit, when the tree is not a git work tree")
    ap.add_argument("--out-dir", default="tests/data")
    return ap.parse_args(argv)


def main(argv=None):
    a = parse_args(argv)
    torch.set_num_threads(1)
    commit = repo_commit(a.diffusers_src, a.diffusers_commit)
    ldm_commit = repo_commit(a.ldm_src, a.ldm_commit) if a.ldm_src else None
    d = load_diffusers(a.diffusers_src)
    command = ("/usr/bin/python3 tools/make_vae_golden.py "
               + " ".join(shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:]))
               + f" [diffusers {d.version} @ {commit}"
               + (f"; CompVis/stable-diffusion @ {ldm_commit}" if ldm_commit else "") + "] float64")

    model, sd32 = build_model(d)
    facts = model_facts(model)
    image, noise, act_image = draw_inputs()
    with rs.Float64():
        res = compute(model, image, noise, act_image)
    ops, ops_attn = compute_ops(d)

    os.makedirs(a.out_dir, exist_ok=True)
    meta = {"format": "pt", "diffusers_commit": commit}
    write_safetensors(os.path.join(a.out_dir, "vae_tiny.safetensors"), sd32,
                      {**meta, "names": "diffusers AutoencoderKL"})
    write_safetensors(os.path.join(a.out_dir, "vae_tiny_ldm.safetensors"), ldm_state_dict(sd32),
                      {**meta, "names": "LDM (CompVis) AutoencoderKL"})
    with tempfile.TemporaryDirectory() as tmp:
        model.save_config(tmp)
        cfg = json.load(open(os.path.join(tmp, "config.json")))
    with open(os.path.join(a.out_dir, "vae_tiny_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    h5 = os.path.join(a.out_dir, "vae_tiny_golden.h5")
    write_h5(h5, res, ops, facts, commit, command)

    for name in ("vae_tiny.safetensors", "vae_tiny_ldm.safetensors", "vae_tiny_config.json",
                 "vae_tiny_golden.h5"):
        print(f"wrote {os.path.join(a.out_dir, name)} "
              f"({os.path.getsize(os.path.join(a.out_dir, name))} bytes)")
    print(f"  decoder/output std {res['decoder']['output'].std():.3f}, encoder/mean std "
          f"{res['encoder']['mean'].std():.3f}, logvar range [{res['encoder']['logvar'].min():.2f}, "
          f"{res['encoder']['logvar'].max():.2f}]")

    print("self-checks:")
    golden = h5_tensors(h5)
    rerun, sd_read, st_meta = check_exact(d, a.out_dir, golden)
    assert st_meta["diffusers_commit"] == commit
    for k, v in sd32.items():
        assert np.array_equal(sd_read[k], v.numpy()), k
    with torch.no_grad(), rs.Float64():   # ops re-derived from the file's own inputs
        for k, fn in (("conv_asym", lambda o: F.conv2d(F.pad(o["x"], (0, 1, 0, 1)), o["w"], o["b"],
                                                        stride=2)),
                      ("conv_k1", lambda o: F.conv2d(o["x"], o["w"], o["b"])),
                      ("conv_k3", lambda o: F.conv2d(o["x"], o["w"], o["b"], padding=1)),
                      ("group_norm", lambda o: F.group_norm(o["x"], 4, o["gamma"], o["beta"], 1e-6)),
                      ("upsample", lambda o: F.interpolate(o["x"], scale_factor=2.0)),
                      ("silu", lambda o: F.silu(o["x"])),
                      ("vae_attention", lambda o: load_params(ops_attn, o)(o["x"]))):
            o = {n[len(f"ops/{k}/"):]: v for n, v in golden.items() if n.startswith(f"ops/{k}/")}
            assert torch.equal(fn(o), o["y"]), k
            for n, v in o.items():
                assert torch.equal(v, f32_exact(v)) or n == "y", (k, n)   # inputs float32-exact
    ldm = check_ldm_roundtrip(d, a.out_dir, sd_read)
    check_attention_2_0(d, rerun, golden)
    check_float32(d, sd_read, golden)
    if a.ldm_src:
        check_ldm_model(a.ldm_src, ldm, golden)
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
