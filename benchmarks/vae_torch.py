"""Encode/decode images/s of diffusers' own AutoencoderKL on PyTorch: the baseline of bench_vae.

The model is diffusers' `AutoencoderKL` imported from a source tree (the same import, with the same
shims, as tools/make_vae_golden.py: `load_diffusers`), built with Stable Diffusion's kl-f8 config
(block_out_channels 128/256/512/512, 4 x DownEncoderBlock2D / UpDecoderBlock2D, 2 ResNets per
block, 32 groups, 4 latent channels, mid-block attention), random float32 weights from a fixed seed
(convolution and linear weights and biases normal * 0.02, GroupNorm weight 1 and bias 0, as
bench_vae draws them), in eval mode under torch.no_grad(). Timed: `model.encode(images)` of
(N, 3, S, S) images uniform in [-1, 1] (its latent_dist: the moments and the Gaussian made of them)
and `model.decode(latents).sample` of (N, 4, S/8, S/8) standard normal latents, --warmup untimed
calls, then --iters timed calls, the median reported, with torch.set_num_threads(--threads) (the first warm-up call runs
even with --warmup 0: it counts the FLOPs).
--device cuda times on the GPU (each call ends with torch.cuda.synchronize(); cuDNN's autotuner on,
its search inside that first call); --precision bf16 holds the model and its inputs in bfloat16, as
bench_vae's `:bf16` backends do. fp32 convolutions and matmuls stay off TF32 unless --tf32 (PyTorch
lets cuDNN use TF32 by default; bench_vae's fp32 does not, unless DIT_TF32=1).
On PyTorch 2.x, which has F.scaled_dot_product_attention, diffusers picks its `AttnProcessor2_0`
(PyTorch's fused attention), its default there; on 1.13 the classic `AttnProcessor`.
FLOPs: the same count as bench_vae (2 x the multiply-adds of every convolution and of the
attention's matmuls), counted here from the modules themselves (forward hooks on every Conv2d and
the shapes of the attention's inputs) in the first warm-up call.

  /usr/bin/python3 benchmarks/vae_torch.py --diffusers-src /tmp/diffusers_src --threads 2 --iters 3
  python3 benchmarks/vae_torch.py --diffusers-src .gpu/diffusers --device cuda --precision bf16 --batch 16
"""
import argparse
import json
import os
import statistics
import sys
import time

import types

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    import h5py  # noqa: F401  (make_vae_golden writes its golden files with it; nothing here does)
except ImportError:  # a GPU host's python may lack it: an inert stand-in lets the import succeed
    sys.modules["h5py"] = types.ModuleType("h5py")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import make_vae_golden  # noqa: E402  (load_diffusers: diffusers imported with its shims)

KL_F8 = dict(in_channels=3, out_channels=3, latent_channels=4,
             block_out_channels=[128, 256, 512, 512],
             down_block_types=["DownEncoderBlock2D"] * 4, up_block_types=["UpDecoderBlock2D"] * 4,
             layers_per_block=2, norm_num_groups=32, act_fn="silu", sample_size=256,
             scaling_factor=0.18215, mid_block_add_attention=True)


def load_diffusers(src):
    """diffusers imported as make_vae_golden does. Its last line asserts that PyTorch has no
    F.scaled_dot_product_attention (its float64 golden needs the classic processor); with
    PyTorch 2.x the modules are imported by then, and the SDPA processor is the baseline wanted.
    transformers and peft are hidden: the VAE needs neither, and diffusers' loaders import them
    whenever they are installed, which on the GPU host failed inside transformers itself ("'strict'
    object is not callable", its huggingface_hub too new for it; peft imports transformers) and
    took the baseline down with it."""
    for name in ("transformers", "peft"):
        sys.modules.setdefault(name, None)  # importlib.util.find_spec then says: not installed
    if not hasattr(F, "scaled_dot_product_attention"):
        return make_vae_golden.load_diffusers(src)
    try:
        return make_vae_golden.load_diffusers(src)
    except AssertionError:
        return types.SimpleNamespace(kl=sys.modules["diffusers.models.autoencoders.autoencoder_kl"],
                                     version=sys.modules["diffusers"].__version__)


def build(d, seed):
    torch.manual_seed(seed)
    model = d.kl.AutoencoderKL(**KL_F8)
    with torch.no_grad():
        for _, m in model.named_modules():
            if isinstance(m, nn.GroupNorm):
                m.weight.fill_(1.0)
                m.bias.zero_()
            elif isinstance(m, (nn.Conv2d, nn.Linear)):
                m.weight.normal_(0.0, 0.02)
                if m.bias is not None:
                    m.bias.normal_(0.0, 0.02)
    return model.float().eval()


def count_macs(model, fn):
    """Multiply-adds of one call of fn: every Conv2d's output numel x C_in/groups x kh x kw, and
    each mid-block attention's projections (4 T C^2) and products (2 T^2 C), per sample."""
    macs = [0.0]
    hooks = []

    def conv_hook(m, _inp, out):
        kh, kw = m.kernel_size
        macs[0] += out.numel() * (m.in_channels // m.groups) * kh * kw

    def attn_hook(m, inp, _out):
        x = inp[0]   # (N, C, H, W)
        n, c, t = x.shape[0], x.shape[1], x.shape[2] * x.shape[3]
        macs[0] += n * (4.0 * t * c * c + 2.0 * t * t * c)

    for name, m in model.named_modules():
        if isinstance(m, nn.Conv2d):
            hooks.append(m.register_forward_hook(conv_hook))
        elif name.endswith("mid_block.attentions.0"):
            hooks.append(m.register_forward_hook(attn_hook))
    with torch.no_grad():
        fn()
    for h in hooks:
        h.remove()
    return macs[0]


def attention_processor(model):
    """The class name of the mid-block attention's processor (which attention PyTorch runs)."""
    for name, m in model.named_modules():
        if name.endswith("mid_block.attentions.0"):
            return type(m.processor).__name__
    return "none"


def median_s(fn, warm, reps, sync):
    """Median seconds of reps timed calls after warm untimed ones, all times, the last output;
    sync() waits for the device after every call."""
    with torch.no_grad():
        for _ in range(warm):
            fn()
        sync()
        t = []
        for _ in range(reps):
            t0 = time.perf_counter()
            out = fn()
            sync()
            t.append(time.perf_counter() - t0)
    return statistics.median(t), t, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--diffusers-src", required=True,
                    help="huggingface/diffusers tree (repository root or its src/)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", choices=["encode", "decode", "both"], default="both")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="dtype of the model and its inputs")
    ap.add_argument("--tf32", action="store_true", help="let fp32 convolutions and matmuls use TF32")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("vae_torch: --device cuda: torch.cuda.is_available() is False")
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    torch.backends.cudnn.benchmark = a.device == "cuda"
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    dtype = torch.bfloat16 if a.precision == "bf16" else torch.float32
    d = load_diffusers(a.diffusers_src)
    # nn.Module's own cast: ModelMixin.to consults diffusers' quantizers, a placeholder here.
    model = nn.Module.to(build(d, a.seed), device=a.device, dtype=dtype)
    n, s, ls = a.batch, a.size, a.size // 8
    g = torch.Generator().manual_seed(a.seed)
    images = (torch.rand(n, 3, s, s, generator=g) * 2 - 1).to(device=a.device, dtype=dtype)
    latents = torch.randn(n, 4, ls, ls, generator=g).to(device=a.device, dtype=dtype)
    encode = lambda: model.encode(images).latent_dist  # noqa: E731
    decode = lambda: model.decode(latents).sample      # noqa: E731
    params = sum(p.numel() for p in model.parameters())
    print(f"vae_torch: diffusers {d.version} AutoencoderKL kl-f8, {params / 1e6:.1f} M parameters; "
          f"torch {torch.__version__}, {a.device}, threads {torch.get_num_threads()}, {a.precision}"
          f"{', TF32' if a.tf32 else ''}; attention {attention_processor(model)}; batch {n}, "
          f"images {s}x{s}, latents 4x{ls}x{ls}")
    res = dict(side="pytorch", torch=torch.__version__, diffusers=d.version, device=a.device,
               precision=a.precision, tf32=a.tf32, attention=attention_processor(model), batch=n, size=s,
               threads=torch.get_num_threads())
    finite = True
    for name, fn in (("encode", encode), ("decode", decode)):
        if a.only not in (name, "both"):
            continue
        macs = count_macs(model, fn) / n   # this call is the first warm-up call
        sec, all_t, out = median_s(fn, max(a.warmup - 1, 0), a.iters, sync)
        out = out.mean if name == "encode" else out
        finite = finite and bool(torch.isfinite(out).all())
        res.update({f"{name}_gmac_per_image": macs / 1e9, f"{name}_s": sec,
                    f"{name}_images_s": n / sec, f"{name}_gflop_s": 2 * macs * n / sec / 1e9})
        calls = " ".join(f"{1e3 * t:.1f}" for t in all_t)
        print(f"  {name}: {1e3 * sec:9.1f} ms  {n / sec:8.4f} images/s  "
              f"{2 * macs * n / sec / 1e9:7.1f} GFLOP/s  ({macs / 1e9:.2f} GMAC per image; calls: {calls} ms)")
    res["finite"] = finite
    if not finite:
        print("  WARNING: non-finite values in the outputs")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f)
            f.write("\n")
    return 0 if finite else 3


if __name__ == "__main__":
    sys.exit(main())
