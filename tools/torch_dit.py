"""Compact PyTorch DiT and Gaussian diffusion, a reimplementation of facebookresearch/DiT.

State-dict names and shapes match the official models.py, so official checkpoints load here. It
produces golden files for configs other than the official tiny one (tools/make_golden.py), checks
itself against that file (tools/check_golden.py), and is the PyTorch baseline of the benchmarks.
Nothing here depends on timm: attention and MLP use timm's layout and parameter names.
"""

import math
import re

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FREQUENCY_EMBEDDING_SIZE = 256
LAYERNORM_EPS = 1e-6
NUM_DIFFUSION_STEPS = 1000


def modulate(x, shift, scale):
    """adaLN modulation: x (N,T,D) * (1 + scale (N,D)) + shift (N,D)."""
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


# ---------------------------------------------------------------------------------------------
# Embeddings
# ---------------------------------------------------------------------------------------------

class PatchEmbed(nn.Module):
    """(N,C,H,W) -> (N,T,D) by a stride-p convolution, tokens in row-major (h, w) order."""

    def __init__(self, input_size, patch_size, in_channels, hidden_size):
        super().__init__()
        self.patch_size = (patch_size, patch_size)
        self.grid_size = input_size // patch_size
        self.num_patches = self.grid_size * self.grid_size
        self.proj = nn.Conv2d(in_channels, hidden_size, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        x = self.proj(x)                        # (N, D, H/p, W/p)
        return x.flatten(2).transpose(1, 2)     # (N, T, D)


class TimestepEmbedder(nn.Module):
    """Scalar timesteps -> (N,D): 256 sinusoidal frequencies, then Linear-SiLU-Linear."""

    def __init__(self, hidden_size, frequency_embedding_size=FREQUENCY_EMBEDDING_SIZE):
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(frequency_embedding_size, hidden_size),
            nn.SiLU(),
            nn.Linear(hidden_size, hidden_size),
        )
        self.frequency_embedding_size = frequency_embedding_size

    @staticmethod
    def timestep_embedding(t, dim, dtype=torch.float32, max_period=10000):
        """[cos(t f_i), sin(t f_i)], f_i = max_period^(-i/half), i < half = dim // 2.

        The official code computes this in float32; float64 models compute it in float64 (a
        float32 embedding would cap a float64 reference at float32 accuracy).
        """
        work = torch.float64 if dtype == torch.float64 else torch.float32
        half = dim // 2
        freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=work) / half)
        args = t[:, None].to(work) * freqs.to(t.device)[None]        # (N, half)
        emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)  # (N, 2*half)
        if dim % 2:
            emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
        return emb.to(dtype)

    def forward(self, t):
        w = self.mlp[0].weight
        t_freq = self.timestep_embedding(t, self.frequency_embedding_size, dtype=w.dtype)
        return self.mlp(t_freq)                 # (N, D)


class LabelEmbedder(nn.Module):
    """Class labels -> (N,D). Row num_classes is the null label of classifier-free guidance; it
    exists only when dropout_prob > 0, as in the official code."""

    def __init__(self, num_classes, hidden_size, dropout_prob):
        super().__init__()
        self.embedding_table = nn.Embedding(num_classes + int(dropout_prob > 0), hidden_size)
        self.num_classes = num_classes
        self.dropout_prob = dropout_prob

    def token_drop(self, labels, force_drop_ids=None, generator=None):
        if force_drop_ids is None:
            drop = torch.rand(labels.shape[0], generator=generator) < self.dropout_prob
            drop = drop.to(labels.device)
        else:
            drop = force_drop_ids == 1
        return torch.where(drop, torch.full_like(labels, self.num_classes), labels)

    def forward(self, labels, train, force_drop_ids=None, generator=None):
        if (train and self.dropout_prob > 0) or force_drop_ids is not None:
            labels = self.token_drop(labels, force_drop_ids, generator)
        return self.embedding_table(labels)     # (N, D)


# ---------------------------------------------------------------------------------------------
# Transformer
# ---------------------------------------------------------------------------------------------

class Attention(nn.Module):
    """timm's Attention: fused qkv Linear whose output splits as (B,N,3,H,hd), then proj.

    fused=True uses F.scaled_dot_product_attention where this torch has it (2.0+), as recent timm
    does; the explicit softmax path is the reference (torch 1.13 has only that one).
    """

    fused = hasattr(F, "scaled_dot_product_attention")

    def __init__(self, dim, num_heads):
        super().__init__()
        assert dim % num_heads == 0, f"hidden_size {dim} not divisible by num_heads {num_heads}"
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=True)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)      # each (B, H, N, hd)
        if self.fused:
            x = F.scaled_dot_product_attention(q, k, v)      # (B, H, N, hd)
        else:
            attn = (q * self.scale) @ k.transpose(-2, -1)    # (B, H, N, N)
            x = attn.softmax(dim=-1) @ v                     # (B, H, N, hd)
        x = x.transpose(1, 2).reshape(B, N, C)               # (B, N, D)
        return self.proj(x)


class Mlp(nn.Module):
    """timm's Mlp with tanh-approximated GELU: fc1 (D -> int(D*mlp_ratio)), fc2 back to D."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class DiTBlock(nn.Module):
    """adaLN-Zero block: x += gate_msa * attn(mod(LN(x))); x += gate_mlp * mlp(mod(LN(x)))."""

    def __init__(self, hidden_size, num_heads, mlp_ratio=4.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=LAYERNORM_EPS)
        self.attn = Attention(hidden_size, num_heads)
        self.norm2 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=LAYERNORM_EPS)
        self.mlp = Mlp(hidden_size, int(hidden_size * mlp_ratio))
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden_size, 6 * hidden_size))

    def forward(self, x, c):
        # x (N,T,D), c (N,D); the six modulation vectors are each (N,D)
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = \
            self.adaLN_modulation(c).chunk(6, dim=1)
        x = x + gate_msa.unsqueeze(1) * self.attn(modulate(self.norm1(x), shift_msa, scale_msa))
        x = x + gate_mlp.unsqueeze(1) * self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp))
        return x


class FinalLayer(nn.Module):
    """Modulated LayerNorm then Linear D -> p*p*out_channels."""

    def __init__(self, hidden_size, patch_size, out_channels):
        super().__init__()
        self.norm_final = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=LAYERNORM_EPS)
        self.linear = nn.Linear(hidden_size, patch_size * patch_size * out_channels)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden_size, 2 * hidden_size))

    def forward(self, x, c):
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=1)
        return self.linear(modulate(self.norm_final(x), shift, scale))  # (N, T, p*p*C_out)


class DiT(nn.Module):
    """Diffusion Transformer; constructor arguments and defaults as the official DiT class."""

    def __init__(self, input_size=32, patch_size=2, in_channels=4, hidden_size=1152, depth=28,
                 num_heads=16, mlp_ratio=4.0, class_dropout_prob=0.1, num_classes=1000,
                 learn_sigma=True):
        super().__init__()
        assert input_size % patch_size == 0, "input_size must be a multiple of patch_size"
        self.learn_sigma = learn_sigma
        self.in_channels = in_channels
        self.out_channels = in_channels * 2 if learn_sigma else in_channels
        self.patch_size = patch_size
        self.num_heads = num_heads
        self.num_classes = num_classes

        self.x_embedder = PatchEmbed(input_size, patch_size, in_channels, hidden_size)
        self.t_embedder = TimestepEmbedder(hidden_size)
        self.y_embedder = LabelEmbedder(num_classes, hidden_size, class_dropout_prob)
        num_patches = self.x_embedder.num_patches
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches, hidden_size), requires_grad=False)
        self.blocks = nn.ModuleList(
            [DiTBlock(hidden_size, num_heads, mlp_ratio) for _ in range(depth)])
        self.final_layer = FinalLayer(hidden_size, patch_size, self.out_channels)
        self.initialize_weights()

    def initialize_weights(self):
        """Official init: xavier Linears, zero biases, N(0, 0.02) embeddings, zeroed adaLN and
        output layers, frozen sin-cos pos_embed (rounded to float32, as the official code does)."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
        grid = self.x_embedder.grid_size
        pe = get_2d_sincos_pos_embed(self.pos_embed.shape[-1], grid)
        self.pos_embed.data.copy_(torch.from_numpy(pe).float().unsqueeze(0))
        w = self.x_embedder.proj.weight.data
        nn.init.xavier_uniform_(w.view([w.shape[0], -1]))
        nn.init.zeros_(self.x_embedder.proj.bias)
        nn.init.normal_(self.y_embedder.embedding_table.weight, std=0.02)
        nn.init.normal_(self.t_embedder.mlp[0].weight, std=0.02)
        nn.init.normal_(self.t_embedder.mlp[2].weight, std=0.02)
        zeroed = [b.adaLN_modulation[-1] for b in self.blocks]
        zeroed += [self.final_layer.adaLN_modulation[-1], self.final_layer.linear]
        for lin in zeroed:
            nn.init.zeros_(lin.weight)
            nn.init.zeros_(lin.bias)

    def unpatchify(self, x):
        """(N, T, p*p*C) -> (N, C, H, W); a token's features are ordered (p_row, p_col, c)."""
        c, p = self.out_channels, self.patch_size
        h = w = int(round(x.shape[1] ** 0.5))
        assert h * w == x.shape[1]
        x = x.reshape(x.shape[0], h, w, p, p, c)
        x = torch.einsum("nhwpqc->nchpwq", x)
        return x.reshape(x.shape[0], c, h * p, w * p)

    def forward(self, x, t, y, force_drop_ids=None):
        """x (N,C,H,W), t (N,) timesteps (may be fractional), y (N,) int labels."""
        x = self.x_embedder(x) + self.pos_embed                     # (N, T, D)
        c = self.t_embedder(t) + self.y_embedder(y, self.training, force_drop_ids)  # (N, D)
        for block in self.blocks:
            x = block(x, c)                                          # (N, T, D)
        x = self.final_layer(x, c)                                   # (N, T, p*p*C_out)
        return self.unpatchify(x)                                    # (N, C_out, H, W)

    def forward_with_cfg(self, x, t, y, cfg_scale, guided_channels=3):
        """Classifier-free guidance on a doubled batch (conditional half, then null-label half).

        The first half of x is used for both halves. Guidance applies to the first
        guided_channels output channels; the official default is 3 (for reproducibility of its
        paper numbers); None means all in_channels (the standard choice).
        """
        g = self.in_channels if guided_channels is None else guided_channels
        half = x[: len(x) // 2]
        out = self.forward(torch.cat([half, half], dim=0), t, y)    # (2N, C_out, H, W)
        eps, rest = out[:, :g], out[:, g:]
        cond_eps, uncond_eps = torch.split(eps, len(eps) // 2, dim=0)
        half_eps = uncond_eps + cfg_scale * (cond_eps - uncond_eps)
        return torch.cat([torch.cat([half_eps, half_eps], dim=0), rest], dim=1)

    def trainable_names(self):
        """state_dict names of the trainable tensors (all but pos_embed), in module order."""
        return [n for n, p in self.named_parameters() if p.requires_grad]


# ---------------------------------------------------------------------------------------------
# Fixed 2-D sin-cos position embedding (the official MAE-derived functions)
# ---------------------------------------------------------------------------------------------

def get_1d_sincos_pos_embed_from_grid(embed_dim, pos):
    """pos (M,) -> (M, embed_dim) = [sin(pos w_i), cos(pos w_i)], w_i = 10000^(-i/(D/2))."""
    assert embed_dim % 2 == 0
    omega = np.arange(embed_dim // 2, dtype=np.float64) / (embed_dim / 2.0)
    omega = 1.0 / 10000 ** omega                               # (D/2,)
    out = np.einsum("m,d->md", pos.reshape(-1), omega)          # (M, D/2)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)   # (M, D)


def get_2d_sincos_pos_embed(embed_dim, grid_size):
    """(grid_size**2, embed_dim): first half encodes the column (w), second half the row (h)."""
    assert embed_dim % 2 == 0
    coords = np.arange(grid_size, dtype=np.float32)
    grid = np.stack(np.meshgrid(coords, coords), axis=0)       # [w-grid, h-grid], each (G, G)
    emb_a = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[0])
    emb_b = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[1])
    return np.concatenate([emb_a, emb_b], axis=1)


DIT_PRESETS = {
    f"DiT-{size}/{p}": dict(depth=d, hidden_size=h, patch_size=p, num_heads=nh)
    for size, (d, h, nh) in {"XL": (28, 1152, 16), "L": (24, 1024, 16),
                             "B": (12, 768, 12), "S": (12, 384, 6)}.items()
    for p in (2, 4, 8)
}


def dit_from_preset(name, **kwargs):
    """DiT("DiT-XL/2", input_size=32, ...): preset fields plus overrides."""
    if name not in DIT_PRESETS:
        raise ValueError(f"unknown preset '{name}'; allowed: {', '.join(DIT_PRESETS)}")
    return DiT(**{**DIT_PRESETS[name], **kwargs})


# ---------------------------------------------------------------------------------------------
# Gaussian diffusion (epsilon prediction; learned-range or fixed-large variance)
# ---------------------------------------------------------------------------------------------

def linear_betas(num_steps=NUM_DIFFUSION_STEPS):
    """Ho et al. linear schedule, scaled so any step count spans the same range; float64."""
    scale = 1000 / num_steps
    return np.linspace(scale * 0.0001, scale * 0.02, num_steps, dtype=np.float64)


def space_timesteps(num_timesteps, section_counts):
    """Timesteps kept by respacing: "ddimN" = fixed integer stride giving N steps; otherwise
    comma-separated counts, each spread evenly (rounded) over an equal section of the range."""
    if isinstance(section_counts, str):
        m = re.fullmatch(r"ddim(\d+)", section_counts)
        if m:
            want = int(m.group(1))
            for stride in range(1, num_timesteps):
                if len(range(0, num_timesteps, stride)) == want:
                    return set(range(0, num_timesteps, stride))
            raise ValueError(f"cannot create exactly {want} steps with an integer stride")
        section_counts = [int(s) for s in section_counts.split(",")]
    size_per, extra = divmod(num_timesteps, len(section_counts))
    start, steps = 0, []
    for i, count in enumerate(section_counts):
        size = size_per + (1 if i < extra else 0)
        if size < count:
            raise ValueError(f"cannot divide section of {size} steps into {count}")
        stride = 1 if count <= 1 else (size - 1) / (count - 1)
        steps += [start + round(pos) for pos in _running_sum(stride, count)]
        start += size
    return set(steps)


def _running_sum(stride, count):
    """0, stride, 2*stride, ... accumulated by repeated addition (the official rounding path)."""
    cur, out = 0.0, []
    for _ in range(count):
        out.append(cur)
        cur += stride
    return out


class Diffusion:
    """Float64 schedule of a (possibly respaced) linear-beta Gaussian diffusion.

    timestep_map[i] is the original-process timestep the model sees at respaced index i.
    learn_sigma=True: model output (N, 2C) = [eps, v], variance interpolated in log space between
    the posterior variance (v=-1) and beta (v=+1). False: FIXED_LARGE variance.
    """

    def __init__(self, respacing="", learn_sigma=True, num_steps=NUM_DIFFUSION_STEPS):
        base = linear_betas(num_steps)
        keep = space_timesteps(num_steps, respacing) if respacing else set(range(num_steps))
        acp_base = np.cumprod(1.0 - base)
        betas, last, self.timestep_map = [], 1.0, []
        for i, acp in enumerate(acp_base):
            if i in keep:
                betas.append(1 - acp / last)
                last = acp
                self.timestep_map.append(i)
        self.learn_sigma = learn_sigma
        self._set_betas(np.array(betas, dtype=np.float64))

    def _set_betas(self, betas):
        self.betas = betas
        self.num_timesteps = len(betas)
        alphas = 1.0 - betas
        self.alphas_cumprod = np.cumprod(alphas)
        self.alphas_cumprod_prev = np.append(1.0, self.alphas_cumprod[:-1])
        self.sqrt_alphas_cumprod = np.sqrt(self.alphas_cumprod)
        self.sqrt_one_minus_alphas_cumprod = np.sqrt(1.0 - self.alphas_cumprod)
        self.sqrt_recip_alphas_cumprod = np.sqrt(1.0 / self.alphas_cumprod)
        self.sqrt_recipm1_alphas_cumprod = np.sqrt(1.0 / self.alphas_cumprod - 1)
        one_minus = 1.0 - self.alphas_cumprod
        self.posterior_variance = betas * (1.0 - self.alphas_cumprod_prev) / one_minus
        # log clipped: the posterior variance is 0 at t=0, so index 0 reuses index 1
        self.posterior_log_variance_clipped = np.log(
            np.append(self.posterior_variance[1], self.posterior_variance[1:]))
        self.posterior_mean_coef1 = betas * np.sqrt(self.alphas_cumprod_prev) / one_minus
        self.posterior_mean_coef2 = (1.0 - self.alphas_cumprod_prev) * np.sqrt(alphas) / one_minus
        large = np.append(self.posterior_variance[1], betas[1:])
        self.fixed_large_variance, self.fixed_large_log_variance = large, np.log(large)

    def schedule_arrays(self):
        """The golden file's /schedule group."""
        names = ["betas", "alphas_cumprod", "alphas_cumprod_prev", "posterior_variance",
                 "posterior_log_variance_clipped", "posterior_mean_coef1", "posterior_mean_coef2"]
        return {n: getattr(self, n) for n in names}

    def model_t(self, t):
        """Respaced index -> the timestep the model is conditioned on (same dtype as t)."""
        return torch.tensor(self.timestep_map, dtype=t.dtype, device=t.device)[t]

    def q_sample(self, x_start, t, noise):
        return (_extract(self.sqrt_alphas_cumprod, t, x_start) * x_start
                + _extract(self.sqrt_one_minus_alphas_cumprod, t, x_start) * noise)

    def q_posterior_mean(self, x_start, x_t, t):
        return (_extract(self.posterior_mean_coef1, t, x_t) * x_start
                + _extract(self.posterior_mean_coef2, t, x_t) * x_t)

    def p_mean_variance(self, model_output, x, t):
        """From the raw model output at (x, t): mean, variance, log_variance, pred_xstart of
        p(x_{t-1} | x_t). No clipping of x_0 (clip_denoised=False)."""
        C = x.shape[1]
        if self.learn_sigma:
            assert model_output.shape[1] == 2 * C
            eps, v = torch.split(model_output, C, dim=1)
            min_log = _extract(self.posterior_log_variance_clipped, t, x)
            max_log = _extract(np.log(self.betas), t, x)
            frac = (v + 1) / 2                               # v in [-1, 1] spans [min, max]
            log_var = frac * max_log + (1 - frac) * min_log
            var = torch.exp(log_var)
        else:
            assert model_output.shape[1] == C
            eps = model_output
            var = _extract(self.fixed_large_variance, t, x)
            log_var = _extract(self.fixed_large_log_variance, t, x)
        pred_xstart = (_extract(self.sqrt_recip_alphas_cumprod, t, x) * x
                       - _extract(self.sqrt_recipm1_alphas_cumprod, t, x) * eps)
        mean = self.q_posterior_mean(pred_xstart, x, t)
        return {"mean": mean, "variance": var, "log_variance": log_var,
                "pred_xstart": pred_xstart}

    def p_sample(self, model, x, t, y, noise):
        """One ancestral step with injected noise (no noise where t == 0)."""
        out = self.p_mean_variance(model(x, self.model_t(t), y), x, t)
        nonzero = (t != 0).to(x.dtype).view(-1, *([1] * (x.dim() - 1)))
        sample = out["mean"] + nonzero * torch.exp(0.5 * out["log_variance"]) * noise
        return {"sample": sample, "pred_xstart": out["pred_xstart"]}

    def ddim_sample(self, model, x, t, y):
        """One deterministic DDIM step (eta = 0)."""
        out = self.p_mean_variance(model(x, self.model_t(t), y), x, t)
        eps = ((_extract(self.sqrt_recip_alphas_cumprod, t, x) * x - out["pred_xstart"])
               / _extract(self.sqrt_recipm1_alphas_cumprod, t, x))
        abar_prev = _extract(self.alphas_cumprod_prev, t, x)
        sample = out["pred_xstart"] * torch.sqrt(abar_prev) + torch.sqrt(1 - abar_prev) * eps
        return {"sample": sample, "pred_xstart": out["pred_xstart"]}

    def vb_terms_bpd(self, model_output, x_start, x_t, t):
        """Per-sample VB term in bits: KL(q(x_{t-1}|x_t,x_0) || p) for t > 0, the discretized
        Gaussian decoder NLL at t == 0."""
        true_mean = self.q_posterior_mean(x_start, x_t, t)
        true_log_var = _extract(self.posterior_log_variance_clipped, t, x_t)
        out = self.p_mean_variance(model_output, x_t, t)
        kl = normal_kl(true_mean, true_log_var, out["mean"], out["log_variance"])
        kl = mean_flat(kl) / np.log(2.0)
        nll = -discretized_gaussian_log_likelihood(
            x_start, means=out["mean"], log_scales=0.5 * out["log_variance"])
        nll = mean_flat(nll) / np.log(2.0)
        return torch.where(t == 0, nll, kl)

    def training_losses(self, model, x_start, t, y, noise):
        """MSE on eps (+ VB with the mean detached when learn_sigma). Returns per-sample terms
        {"loss", "mse"[, "vb"]}, each (N,)."""
        x_t = self.q_sample(x_start, t, noise)
        model_output = model(x_t, self.model_t(t), y)
        terms = {}
        C = x_t.shape[1]
        if self.learn_sigma:
            eps, v = torch.split(model_output, C, dim=1)
            frozen = torch.cat([eps.detach(), v], dim=1)    # VB trains only the variance
            terms["vb"] = self.vb_terms_bpd(frozen, x_start, x_t, t)
        else:
            eps = model_output
        terms["mse"] = mean_flat((noise - eps) ** 2)
        terms["loss"] = terms["mse"] + terms["vb"] if "vb" in terms else terms["mse"]
        return terms


def _extract(arr, t, like):
    """arr[t] (float64 numpy, t (N,) long) broadcast to like's shape, in like's dtype.

    The value is rounded to float32 first, as the official _extract_into_tensor does (.float());
    the arithmetic that follows is in like's dtype. The official float64 golden file carries
    this rounding: without it, loss and sampling tensors differ from it by ~1e-7.
    """
    res = torch.from_numpy(arr).to(device=t.device)[t].float().to(like.dtype)
    return res.view(-1, *([1] * (like.dim() - 1))).expand_as(like)


def mean_flat(x):
    return x.mean(dim=list(range(1, x.dim())))


def normal_kl(mean1, logvar1, mean2, logvar2):
    """KL(N(mean1, e^logvar1) || N(mean2, e^logvar2)), elementwise."""
    return 0.5 * (-1.0 + logvar2 - logvar1 + torch.exp(logvar1 - logvar2)
                  + (mean1 - mean2) ** 2 * torch.exp(-logvar2))


def approx_standard_normal_cdf(x):
    return 0.5 * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def discretized_gaussian_log_likelihood(x, *, means, log_scales):
    """log P(bin of x) for x in [-1, 1] quantised to 256 levels (bin half-width 1/255); edge
    bins extend to +-infinity."""
    centered = x - means
    inv_stdv = torch.exp(-log_scales)
    cdf_plus = approx_standard_normal_cdf(inv_stdv * (centered + 1.0 / 255.0))
    cdf_min = approx_standard_normal_cdf(inv_stdv * (centered - 1.0 / 255.0))
    log_cdf_plus = torch.log(cdf_plus.clamp(min=1e-12))
    log_one_minus_cdf_min = torch.log((1.0 - cdf_min).clamp(min=1e-12))
    log_delta = torch.log((cdf_plus - cdf_min).clamp(min=1e-12))
    return torch.where(x < -0.999, log_cdf_plus,
                       torch.where(x > 0.999, log_one_minus_cdf_min, log_delta))
