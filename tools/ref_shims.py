"""Run the reference repositories' own code (LightningDiT, SiT, DiT, Min-SNR) on Debian's PyTorch 1.13.

What 1.13 and this machine lack, and what stands in for it (installed by `install()`):
- `torch.compile` (2.0+): the identity decorator. The references use it only as `@torch.compile`
  on pure functions and forward methods; compiling never changes their math.
- `timm.models.vision_transformer.{PatchEmbed, Attention, Mlp}`: timm's layout and parameter
  names (`proj`, `qkv`, `proj`, `fc1`, `fc2`), the explicit softmax attention path.
- `einops.{rearrange, repeat}`: exactly the three patterns LightningDiT's RoPE uses (an adjacent
  pair split, its merge, and a repeat that doubles each entry in place); any other pattern raises.
- `fairscale.nn.model_parallel.*`: names only. LightningDiT's `models/rmsnorm.py` (a copy of
  Llama's model file) imports them at module level; `RMSNorm` never uses them.
- `torchdiffeq.odeint`: the fixed-grid methods `euler` and `heun2` as torchdiffeq defines them
  (`FixedGridODESolver.integrate`: for each grid interval, y1 = y0 + step(t0, dt, y0); Euler's step
  dt*f(t0, y0); Heun2's dt/2*(f(t0, y0) + f(t0 + dt, y0 + dt*f(t0, y0)))). Adaptive methods raise.
- `tqdm.tqdm`: the identity.
- `F.scaled_dot_product_attention` (2.0+) is not shimmed: LightningDiT's Attention has its own
  explicit softmax path, selected by setting `fused_attn = False` on each instance (same math).

`Float64()` is a context that makes the references' float32 casts float64, so float64 numbers come
out of their unchanged lines: the default dtype becomes float64 (`torch.linspace`, `torch.rand`,
`torch.ones` in the samplers), `Tensor.float()` returns float64 (RMSNorm's upcast, RoPE's
frequencies, the timestep embedding's `t.float()`, DiT's `_extract_into_tensor`, pos_embed's
`.float()`), and an explicit `dtype=torch.float32` given to `torch.arange` / `torch.tensor` means
float64 (the timestep embedding's frequency table, the logit-normal sampler's output). Outside
the context every function is PyTorch's own again (the float32 self-check runs there).
"""

import contextlib
import importlib
import math
import sys
import types

import torch
import torch.nn as nn

_ORIG = {"float": torch.Tensor.float, "arange": torch.arange, "tensor": torch.tensor,
         "randn": torch.randn, "randn_like": torch.randn_like}


# ---------------------------------------------------------------------------------------------
# Module shims
# ---------------------------------------------------------------------------------------------

def _compile(model=None, **_kwargs):
    return model if model is not None else (lambda f: f)


class PatchEmbed(nn.Module):
    """timm PatchEmbed: stride-p convolution, tokens flattened row-major (h, w)."""

    def __init__(self, img_size=224, patch_size=16, in_chans=3, embed_dim=768, norm_layer=None,
                 flatten=True, bias=True):
        super().__init__()
        self.img_size = (img_size, img_size)
        self.patch_size = (patch_size, patch_size)
        self.grid_size = (img_size // patch_size, img_size // patch_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.flatten = flatten
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size,
                              bias=bias)
        self.norm = norm_layer(embed_dim) if norm_layer else nn.Identity()

    def forward(self, x):
        x = self.proj(x)
        if self.flatten:
            x = x.flatten(2).transpose(1, 2)
        return self.norm(x)


class Attention(nn.Module):
    """timm Attention (explicit path): qkv split as (B, N, 3, heads, head_dim)."""

    def __init__(self, dim, num_heads=8, qkv_bias=False, qk_norm=False, attn_drop=0.0,
                 proj_drop=0.0, norm_layer=nn.LayerNorm):
        super().__init__()
        assert dim % num_heads == 0
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.q_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
        self.k_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        attn = self.attn_drop(attn.softmax(dim=-1))
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj_drop(self.proj(x))


class Mlp(nn.Module):
    """timm Mlp: fc1, act, fc2 (dropouts 0)."""

    def __init__(self, in_features, hidden_features=None, out_features=None, act_layer=nn.GELU,
                 norm_layer=None, bias=True, drop=0.0):
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features, bias=bias)
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop)
        self.norm = norm_layer(hidden_features) if norm_layer is not None else nn.Identity()
        self.fc2 = nn.Linear(hidden_features, out_features, bias=bias)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x):
        return self.drop2(self.fc2(self.norm(self.drop1(self.act(self.fc1(x))))))


def _rearrange(x, pattern, **axes):
    p = " ".join(pattern.split())
    if p == "... (d r) -> ... d r":
        return x.reshape(*x.shape[:-1], x.shape[-1] // axes["r"], axes["r"])
    if p == "... d r -> ... (d r)":
        return x.flatten(-2)
    raise NotImplementedError(f"einops shim: pattern {pattern!r}")


def _repeat(x, pattern, **axes):
    if " ".join(pattern.split()) == "... n -> ... (n r)":
        r = axes["r"]
        return x.unsqueeze(-1).expand(*x.shape, r).reshape(*x.shape[:-1], x.shape[-1] * r)
    raise NotImplementedError(f"einops shim: pattern {pattern!r}")


def _odeint(func, y0, t, rtol=1e-7, atol=1e-9, method=None, options=None):
    """torchdiffeq's fixed-grid integrate for `euler` and `heun2` (outputs on the grid t)."""
    if method not in ("euler", "heun2"):
        raise NotImplementedError(f"torchdiffeq shim: method {method!r} (only euler, heun2)")
    ys, y = [y0], y0
    for t0, t1 in zip(t[:-1], t[1:]):
        dt = t1 - t0
        f0 = func(t0, y)
        if method == "euler":
            dy = dt * f0
        else:
            f_pred = func(t0 + dt, y + f0 * dt)
            dy = dt * 0.5 * (f0 + f_pred)
        y = y + dy
        ys.append(y)
    return torch.stack(ys)


class _Dummy:
    def __init__(self, *a, **k):
        raise RuntimeError("fairscale shim: model-parallel layers are not available")


def _module(name, **attrs):
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    sys.modules[name] = m
    return m


def install():
    """Install every shim (idempotent)."""
    if not hasattr(torch, "compile"):
        torch.compile = _compile
    if "timm" not in sys.modules:
        _module("timm")
        _module("timm.models")
        _module("timm.models.vision_transformer", PatchEmbed=PatchEmbed, Attention=Attention,
                Mlp=Mlp)
    if "einops" not in sys.modules:
        _module("einops", rearrange=_rearrange, repeat=_repeat)
    if "fairscale" not in sys.modules:
        _module("fairscale")
        _module("fairscale.nn")
        _module("fairscale.nn.model_parallel")
        _module("fairscale.nn.model_parallel.initialize")
        _module("fairscale.nn.model_parallel.layers", ColumnParallelLinear=_Dummy,
                ParallelEmbedding=_Dummy, RowParallelLinear=_Dummy)
        sys.modules["fairscale.nn.model_parallel"].initialize = \
            sys.modules["fairscale.nn.model_parallel.initialize"]
        sys.modules["fairscale.nn.model_parallel"].layers = \
            sys.modules["fairscale.nn.model_parallel.layers"]
    if "torchdiffeq" not in sys.modules:
        _module("torchdiffeq", odeint=_odeint)
    if "tqdm" not in sys.modules:
        _module("tqdm", tqdm=lambda it=None, *a, **k: it)


# ---------------------------------------------------------------------------------------------
# Importing a checkout
# ---------------------------------------------------------------------------------------------

def import_repo(path, names):
    """Import top-level modules `names` (e.g. "models.lightningdit", "transport") from the checkout
    at `path`, then drop them from sys.modules so another checkout's same-named packages (SiT and
    LightningDiT both have `transport` and `models`) can be imported next. Returns {name: module}."""
    tops = {n.split(".")[0] for n in names}
    saved = {k: v for k, v in sys.modules.items() if k.split(".")[0] in tops}
    for k in saved:
        del sys.modules[k]
    sys.path.insert(0, path)
    try:
        out = {n: importlib.import_module(n) for n in names}
    finally:
        sys.path.remove(path)
        for k in [k for k in sys.modules if k.split(".")[0] in tops]:
            del sys.modules[k]
        sys.modules.update(saved)
    return out


# ---------------------------------------------------------------------------------------------
# Float64 mode and injected noise
# ---------------------------------------------------------------------------------------------

def _f64_dtype(kwargs):
    if kwargs.get("dtype") is torch.float32:
        kwargs["dtype"] = torch.float64
    return kwargs


def _float_to_f64(self, memory_format=torch.preserve_format):
    return self.to(torch.float64)


def _float_rounded(self, memory_format=torch.preserve_format):
    return _ORIG["float"](self).to(torch.float64)


@contextlib.contextmanager
def Float64(round_float=False):
    """The references' float32 casts become float64 (see the module docstring). With
    round_float, `Tensor.float()` still rounds to float32 (then returns float64): the convention
    of the project's DiT golden files, whose pos_embed and `_extract_into_tensor` coefficients
    carry the official code's float32 rounding."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    torch.Tensor.float = _float_rounded if round_float else _float_to_f64
    torch.arange = lambda *a, **k: _ORIG["arange"](*a, **_f64_dtype(k))
    torch.tensor = lambda *a, **k: _ORIG["tensor"](*a, **_f64_dtype(k))
    try:
        yield
    finally:
        torch.Tensor.float = _ORIG["float"]
        torch.arange = _ORIG["arange"]
        torch.tensor = _ORIG["tensor"]
        torch.set_default_dtype(old)


@contextlib.contextmanager
def given_randn(noise):
    """`torch.randn(shape)` / `torch.randn_like(x)` inside return `noise` (shape must match;
    once): the SDE step's Wiener increment and DiT's p_sample noise are drawn inside the
    references' functions."""
    calls = []

    def fake(*size, **kwargs):
        shape = tuple(size[0]) if len(size) == 1 and not isinstance(size[0], int) else size
        if tuple(shape) != tuple(noise.shape) or calls:
            raise RuntimeError(f"given_randn: unexpected draw {tuple(shape)}")
        calls.append(shape)
        return noise.clone().to(kwargs.get("dtype") or torch.get_default_dtype())

    torch.randn = fake
    torch.randn_like = lambda x, **kwargs: fake(tuple(x.shape), dtype=kwargs.get("dtype", x.dtype))
    try:
        yield
    finally:
        torch.randn = _ORIG["randn"]
        torch.randn_like = _ORIG["randn_like"]
    if not calls:
        raise RuntimeError("given_randn: the noise was never drawn")


def rel_l2(a, b):
    a, b = a.detach().to(torch.float64), b.detach().to(torch.float64)
    n = b.norm().item()
    return (a - b).norm().item() / (n if n > 0 else 1.0)


__all__ = ["install", "import_repo", "Float64", "given_randn", "rel_l2", "math"]
